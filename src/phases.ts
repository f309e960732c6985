/**
 * Host phase timers (hf2q's HF2Q_HOST_PHASES): nanosecond accumulators around the host's
 * waits and copies. Off by default; when off, a timed section costs one branch.
 * The phases: the head's wait, its copy of the logits to the host, its non-finite check, and
 * the decode loop's finalize (token selection); and headDevice, the device's own time for the
 * head where it keeps one (a GPU's start to end, inside headWait; the CPU has none).
 */
export const phases = ["headWait", "headDevice", "headReadback", "headCheck", "finalize"] as const;
export type Phase = (typeof phases)[number];

const zeros = () => Object.fromEntries(phases.map((phase) => [phase, 0])) as Record<Phase, number>;

export class HostPhases {
  enabled = false;
  readonly #totalNs = zeros();
  readonly #calls = zeros();

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

  /** Adds a duration measured elsewhere (by the device) to `phase`, when enabled. */
  add(phase: Phase, ns: number): void {
    if (!this.enabled) return;
    this.#totalNs[phase] += ns;
    this.#calls[phase] += 1;
  }

  snapshot(): Record<Phase, { totalNs: number; calls: number }> {
    const out = {} as Record<Phase, { totalNs: number; calls: number }>;
    for (const phase of phases) out[phase] = { totalNs: this.#totalNs[phase], calls: this.#calls[phase] };
    return out;
  }

  reset(): void {
    for (const phase of phases) {
      this.#totalNs[phase] = 0;
      this.#calls[phase] = 0;
    }
  }
}

/** The process-wide phase timers. */
export const hostPhases = new HostPhases();
