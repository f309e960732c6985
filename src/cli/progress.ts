/**
 * A progress bar on stderr. On a TTY it redraws one line (at most ~10 times a second) and
 * clears it at the end; elsewhere (pipes, CI logs) it prints nothing, so output stays clean.
 */
export class ProgressBar {
  readonly #stream: NodeJS.WriteStream;
  readonly #enabled: boolean;
  #last = 0;
  #drawn = false;

  constructor(
    readonly label: string,
    readonly total: number,
    opts: { enabled?: boolean; stream?: NodeJS.WriteStream } = {},
  ) {
    this.#stream = opts.stream ?? process.stderr;
    this.#enabled = (opts.enabled ?? true) && this.#stream.isTTY === true;
  }

  update(done: number, note = ""): void {
    if (!this.#enabled) return;
    const now = performance.now();
    if (done < this.total && now - this.#last < 100) return;
    this.#last = now;
    const width = 30;
    const frac = this.total > 0 ? Math.min(1, done / this.total) : 1;
    const filled = Math.round(frac * width);
    const bar = "=".repeat(filled) + (filled < width ? ">" : "") + " ".repeat(Math.max(0, width - filled - 1));
    const columns = this.#stream.columns ?? 100;
    const line = `${this.label} [${bar}] ${done}/${this.total}${note ? ` ${note}` : ""}`.slice(0, Math.max(10, columns - 1));
    this.#stream.write(`\r\x1b[2K${line}`);
    this.#drawn = true;
  }

  /** Removes the bar's line. */
  finish(): void {
    if (this.#enabled && this.#drawn) this.#stream.write("\r\x1b[2K");
    this.#drawn = false;
  }
}
