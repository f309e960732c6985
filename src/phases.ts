/**
 * Host phase timers (hf2q's HF2Q_HOST_PHASES): nanosecond accumulators around the host's
 * waits and copies. Off by default; when off, a timed section costs one branch.
 */
export type Phase = "headWait" | "headReadback" | "finalize";

export class HostPhases {
  enabled = false;
  readonly #totalNs: Record<Phase, number> = { headWait: 0, headReadback: 0, finalize: 0 };
  readonly #calls: Record<Phase, number> = { headWait: 0, headReadback: 0, finalize: 0 };

  /** Runs fn, adding its duration to `phase` when enabled. */
  time<T>(phase: Phase, fn: () => T): T {
    if (!this.enabled) return fn();
    const start = Bun.nanoseconds();
    try {
      return fn();
    } finally {
      this.#totalNs[phase] += Bun.nanoseconds() - start;
      this.#calls[phase] += 1;
    }
  }

  snapshot(): Record<Phase, { totalNs: number; calls: number }> {
    const out = {} as Record<Phase, { totalNs: number; calls: number }>;
    for (const phase of Object.keys(this.#totalNs) as Phase[]) {
      out[phase] = { totalNs: this.#totalNs[phase], calls: this.#calls[phase] };
    }
    return out;
  }

  reset(): void {
    for (const phase of Object.keys(this.#totalNs) as Phase[]) {
      this.#totalNs[phase] = 0;
      this.#calls[phase] = 0;
    }
  }
}

/** The process-wide phase timers. */
export const hostPhases = new HostPhases();
