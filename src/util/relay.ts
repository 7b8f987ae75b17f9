/**
 * Run `gen` to its end from inside another generator: each value it yields becomes values of the
 * caller's through `each`, and what it returns is returned. When the caller is stopped early, `gen`
 * is stopped too, so its `finally` blocks run (a generation consumes the token it last reported).
 * `for await` would do the stopping but loses the return value.
 */
export async function* relay<T, R, E>(gen: AsyncGenerator<T, R>, each: (value: T) => Iterable<E> | AsyncIterable<E>): AsyncGenerator<E, R> {
  let ended = false;
  try {
    for (;;) {
      const step = await gen.next();
      if (step.done) {
        ended = true;
        return step.value;
      }
      yield* each(step.value);
    }
  } finally {
    if (!ended) await gen.return(undefined as never);
  }
}
