/**
 * Worker half of the read-bandwidth probe (see bandwidth.ts): waits on a shared generation
 * counter, hashes its share of the shared buffer with the native XXH3, and counts itself done.
 */
const scope = globalThis as unknown as { onmessage: ((event: MessageEvent) => void) | null };

scope.onmessage = (event: MessageEvent) => {
  const { buffer, control, offset, length } = event.data as { buffer: SharedArrayBuffer; control: SharedArrayBuffer; offset: number; length: number };
  const bytes = new Uint8Array(buffer, offset, length);
  const ctl = new Int32Array(control);
  let generation = 0;
  postMessage("ready");
  for (;;) {
    Atomics.wait(ctl, 0, generation);
    generation = Atomics.load(ctl, 0);
    if (generation < 0) break;
    Bun.hash.xxHash3(bytes);
    Atomics.add(ctl, 1, 1);
    Atomics.notify(ctl, 1);
  }
};
