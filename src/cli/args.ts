/**
 * Command-line flags: `--name value`, `--name=value` and boolean `--name`. Every problem is a
 * UsageError with a one-line message naming the flag and the value, raised while parsing,
 * before a command does any work.
 */
import { backendKinds, MlxDevice, type BackendKind } from "../runtime.ts";

export class UsageError extends Error {
  override readonly name = "UsageError";
}

export interface FlagSpec {
  name: string;
  /** Placeholder of the value ("N", "FILE"); absent for a boolean flag. */
  value?: string;
  help: string;
}

export type Flags = Map<string, string | true>;

export function parseFlags(argv: readonly string[], specs: readonly FlagSpec[], command: string): Flags {
  const byName = new Map(specs.map((s) => [s.name, s]));
  const out: Flags = new Map();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith("--")) throw new UsageError(`${command}: unexpected argument '${arg}' (see lmhead ${command} --help)`);
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    const spec = byName.get(name);
    if (!spec) throw new UsageError(`${command}: unknown flag --${name} (see lmhead ${command} --help)`);
    if (out.has(name)) throw new UsageError(`${command}: --${name} given twice`);
    if (spec.value === undefined) {
      if (eq >= 0) throw new UsageError(`${command}: --${name} takes no value`);
      out.set(name, true);
      continue;
    }
    let value: string | undefined;
    if (eq >= 0) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      if (value === undefined || value.startsWith("--")) throw new UsageError(`${command}: --${name} needs a value (${spec.value})`);
      i++;
    }
    if (value.length === 0) throw new UsageError(`${command}: --${name} needs a value (${spec.value})`);
    out.set(name, value);
  }
  return out;
}

export function flagHelp(specs: readonly FlagSpec[]): string {
  const left = specs.map((s) => `  --${s.name}${s.value ? ` ${s.value}` : ""}`);
  const width = Math.max(...left.map((l) => l.length)) + 2;
  return specs
    .map((s, i) => {
      const [first, ...rest] = s.help.split("\n");
      return [left[i]!.padEnd(width) + first, ...rest.map((l) => " ".repeat(width) + l)].join("\n");
    })
    .join("\n");
}

export function stringFlag(flags: Flags, name: string): string | undefined {
  const v = flags.get(name);
  return typeof v === "string" ? v : undefined;
}

/** An integer flag in [min, max], or the default. */
export function intFlag(flags: Flags, name: string, fallback: number, min: number, max: number, command: string): number {
  const v = stringFlag(flags, name);
  if (v === undefined) return fallback;
  const n = /^[+]?\d+$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${command}: --${name} must be an integer in [${min}, ${max}], got '${v}'`);
  return n;
}

/** A comma-separated list of integers in [min, max]. */
export function intListFlag(flags: Flags, name: string, fallback: readonly number[], min: number, max: number, command: string): number[] {
  const v = stringFlag(flags, name);
  if (v === undefined) return [...fallback];
  const out = v.split(",").map((part) => {
    const n = /^\s*\d+\s*$/.test(part) ? Number(part) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${command}: --${name} must be integers in [${min}, ${max}] separated by commas, got '${v}'`);
    return n;
  });
  return [...new Set(out)].sort((a, b) => a - b);
}

/** "A-B" or "A": a range of positive integers. */
export function rangeFlag(flags: Flags, name: string, fallback: [number, number], max: number, command: string): [number, number] {
  const v = stringFlag(flags, name);
  if (v === undefined) return fallback;
  const m = /^(\d+)(?:-(\d+))?$/.exec(v);
  const a = m ? Number(m[1]) : NaN;
  const b = m ? Number(m[2] ?? m[1]) : NaN;
  if (!(a >= 1 && b >= a && b <= max)) throw new UsageError(`${command}: --${name} must be N or A-B with 1 <= A <= B <= ${max}, got '${v}'`);
  return [a, b];
}

/** --backend (or --`name`): one of the runtime's backends, cpu when not given. */
export function backendFlag(flags: Flags, command: string, name = "backend"): BackendKind {
  const v = stringFlag(flags, name) ?? "cpu";
  const kind = backendKinds.find((k) => k === v);
  if (kind === undefined) throw new UsageError(`${command}: --${name} must be one of ${backendKinds.join(", ")}, got '${v}'`);
  return kind;
}

const mib = 2 ** 20;

/** --probe-mib: the read-bandwidth probe's size in bytes, 0 to skip it, else within the probe's bounds. */
export function probeFlag(flags: Flags, command: string): number {
  const { min, max, default: fallback } = MlxDevice.probeBytes;
  const text = stringFlag(flags, "probe-mib");
  if (text === undefined) return fallback;
  const value = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!(value === 0 || (value >= min / mib && value <= max / mib))) {
    throw new UsageError(`${command}: --probe-mib must be 0 or an integer in [${min / mib}, ${max / mib}], got '${text}'`);
  }
  return value * mib;
}

/** Flags every command has. */
export const commonFlags: FlagSpec[] = [
  { name: "seed", value: "N", help: "seed of the weights or workload and the rows (default 1)" },
  { name: "backend", value: "NAME", help: `${backendKinds.join(", ")} (default cpu)` },
  {
    name: "probe-mib",
    value: "MIB",
    help: `read-bandwidth probe buffer in MiB (default ${MlxDevice.probeBytes.default / mib}, at least ${MlxDevice.probeBytes.min / mib},\nat most ${MlxDevice.probeBytes.max / mib}; 0 skips the probe)`,
  },
  { name: "no-progress", help: "no progress bar (drawn on stderr only when stderr is a TTY)" },
  { name: "help", help: "this help" },
];
