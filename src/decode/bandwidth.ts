/**
 * This machine's read bandwidth, measured in the same process as the figures it scales:
 * the head's floor is weight bytes / this. The probe is native and runs on the device's
 * own threads with wide loads, as the head does.
 */
import type { MlxDevice } from "../runtime.ts";

export interface BandwidthResult {
  /** Bytes read per pass. */
  bytes: number;
  passes: number;
  /** GB/s (1e9 bytes) with all of the device's threads: the reference a head is compared against. */
  gbs: number;
  /** GB/s with one thread. */
  oneThreadGbs: number;
  threads: number;
  method: string;
}

export interface BandwidthOptions {
  /** Buffer size (default 512 MiB: 16× a 32 MiB L3). */
  bytes?: number;
  /** Passes per measurement (default 5); the median counts. */
  passes?: number;
}

export function measureReadBandwidth(device: MlxDevice, opts: BandwidthOptions = {}): BandwidthResult {
  const bytes = opts.bytes ?? 512 * 2 ** 20;
  const passes = opts.passes ?? 5;
  const { allThreads, oneThread } = device.readBandwidth(bytes, passes);
  return {
    bytes,
    passes,
    gbs: allThreads / 1e9,
    oneThreadGbs: oneThread / 1e9,
    threads: device.threads,
    method: `native probe: ${Math.round(bytes / 2 ** 20)} MiB read with wide vector loads on the device's ${device.threads} threads, median of ${passes}`,
  };
}
