/**
 * A bounded histogram of durations: 64 buckets per power of two, so a quantile is off by at most
 * 1/128 of its value, in fixed memory whatever the number of samples (a decode loop records
 * one per step, for as long as it runs).
 */
const subBuckets = 64;
/** Powers of two covered: values up to 2^48 (78 hours in ns); larger ones count in the last bucket. */
const octaves = 48;

export interface Quantiles {
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export class LogHistogram {
  readonly #counts = new Float64Array(octaves * subBuckets);
  #count = 0;
  #max = 0;

  get count(): number {
    return this.#count;
  }

  /** Records one value (>= 0; values below 1 count as 1). */
  record(value: number): void {
    this.#counts[bucketOf(value)]! += 1;
    this.#count++;
    if (value > this.#max) this.#max = value;
  }

  /** The q-quantile (0 < q <= 1) by nearest rank, as its bucket's middle; NaN when empty. */
  quantile(q: number): number {
    if (this.#count === 0) return NaN;
    const rank = Math.max(1, Math.ceil(q * this.#count));
    let seen = 0;
    for (let i = 0; i < this.#counts.length; i++) {
      seen += this.#counts[i]!;
      if (seen >= rank) return Math.min(this.#max, middleOf(i));
    }
    return this.#max;
  }

  quantiles(): Quantiles {
    return { p50: this.quantile(0.5), p90: this.quantile(0.9), p99: this.quantile(0.99), max: this.#count === 0 ? NaN : this.#max };
  }
}

function bucketOf(value: number): number {
  if (!(value >= 1)) return 0;
  let octave = Math.floor(Math.log2(value));
  // log2 may round across a power of two; settle on 2^octave <= value < 2^(octave+1).
  if (2 ** octave > value) octave--;
  else if (2 ** (octave + 1) <= value) octave++;
  if (octave >= octaves) return octaves * subBuckets - 1;
  const sub = Math.floor((value / 2 ** octave - 1) * subBuckets);
  return octave * subBuckets + sub;
}

function middleOf(bucket: number): number {
  const octave = Math.floor(bucket / subBuckets);
  const sub = bucket % subBuckets;
  return 2 ** octave * (1 + (sub + 0.5) / subBuckets);
}
