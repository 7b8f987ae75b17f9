/** The package version, reported by `waste --version` and `waste info`. */
export const VERSION = '0.1.0';
