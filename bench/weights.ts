/**
 * Bench weights, fast: a seeded tile of random-but-valid blocks (random codes, finite f16
 * scales; see src/artifact/synth.ts) is generated once and copied (memcpy speed) over the
 * rest of the head, written straight into the device buffer. A 262144 x 2816 F32 head
 * (2.95 GB) takes about a second instead of minutes of per-value generation; the repeat
 * period (4096 rows, many MB) is far past the caches, so the head still streams from memory.
 */
import { synthBlocks } from "../src/artifact/synth.ts";
import { Rng } from "../src/random.ts";
import { rowBytes } from "../src/formats.ts";

export const TILE_ROWS = 4096;

/** Fills dst (exactly a [vocab, hidden] head of typeId) with seeded valid blocks. */
export function fillHead(dst: Uint8Array, typeId: number, hidden: number, vocab: number, seed: number): void {
  const headRowBytes = rowBytes(typeId, hidden);
  const total = headRowBytes * vocab;
  if (dst.byteLength !== total) throw new Error(`head buffer has ${dst.byteLength} bytes, needs ${total}`);
  const tileRows = Math.min(TILE_ROWS, vocab);
  const rng = new Rng(seed ^ Math.imul(typeId + 1, 0x9e3779b1));
  for (let r = 0; r < tileRows; r++) synthBlocks(typeId, hidden, rng, {}, dst.subarray(r * headRowBytes, (r + 1) * headRowBytes));
  // Double the filled prefix until the whole head is covered.
  let filled = tileRows * headRowBytes;
  while (filled < total) {
    const n = Math.min(filled, total - filled);
    dst.copyWithin(filled, 0, n);
    filled += n;
  }
}
