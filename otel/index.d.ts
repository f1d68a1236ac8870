// Types of `deadbolt/otel` (require). Structural types: @opentelemetry/api need not be
// installed for these to compile; its TracerProvider and MeterProvider fit them.

/**
 * OpenTelemetry spans and metrics from deadbolt's diagnostics channels.
 *
 * @packageDocumentation
 * @module deadbolt/otel
 */

/** Anything with `getTracer(name, version)`: an OpenTelemetry TracerProvider. */
export interface TracerProviderLike {
  getTracer(name: string, version?: string): unknown
}

/** Anything with `getMeter(name, version)`: an OpenTelemetry MeterProvider. */
export interface MeterProviderLike {
  getMeter(name: string, version?: string): unknown
}

export interface InstrumentOptions {
  /** Where spans go (default: the global tracer provider of @opentelemetry/api). */
  tracerProvider?: TracerProviderLike
  /** Where metrics go (default: the global meter provider of @opentelemetry/api). */
  meterProvider?: MeterProviderLike
  /**
   * The `deadbolt.lock.name` attribute of a key. Keep its values few: every distinct value is
   * a time series. Default: `defaultLockName` (identifiers replaced by `*`). If it throws,
   * the default is used, with one process warning (`DEADBOLT_OTEL_LOCK_NAME`).
   */
  lockName?: (key: string) => string
  /**
   * The most distinct (store, kind, lock name) series the metrics get (an integer >= 1;
   * default 250). The names past it are counted together in one series whose only attribute is
   * `otel.metric.overflow: true`, as the OpenTelemetry SDKs' cardinality limit does.
   */
  cardinalityLimit?: number
}

/**
 * Records spans (`lock.acquire`, `lock.hold`) and metrics (`deadbolt.lock.*`) for every
 * deadbolt client of this process, from deadbolt's diagnostics channels. Returns a function
 * that stops it and ends the spans still open. Throws ERR_LOCK_OTEL_API_MISSING when
 * @opentelemetry/api is not installed, and a TypeError (with a `code`, naming the option) for
 * an unknown option, a provider without getTracer/getMeter or a lockName that is not a function
 * (a RangeError, ERR_OUT_OF_RANGE, for a cardinalityLimit that is not an integer >= 1).
 */
export declare function instrument(options?: InstrumentOptions): () => void

/**
 * `order:1234:3f2a…-…` → `order:*:*`: e-mail addresses, UUIDs, ULIDs, hex digests of 12
 * characters or more, random-looking base64 words of 16 or more, and digit runs replaced by `*`.
 */
export declare function defaultLockName(key: string): string
