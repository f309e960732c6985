#!/usr/bin/env bun
/**
 * The lmhead command line: a table of commands, each parsing its own flags. The package's
 * commands are here (decode); a source checkout adds its own (bench, soak) through
 * bench/cli.ts, so this package never imports bench/.
 * Errors are one line on stderr and a non-zero exit: 2 for usage, 1 for everything else.
 */
import { LmheadError } from "../errors.ts";
import { UsageError } from "./args.ts";
import { decodeCommand } from "./decode.ts";

export interface Command {
  name: string;
  /** For the top-level usage: lines of at most ~80 columns. */
  summary: string;
  /** Parses argv (a UsageError before any work), runs, and returns the exit code. */
  run(argv: string[]): Promise<number>;
}

/** The commands of the package. */
export const packageCommands: readonly Command[] = [decodeCommand];

function usage(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((c) => c.name.length)) + 4;
  const lines = commands.map((c) => {
    const [first, ...rest] = c.summary.split("\n");
    return [`  ${c.name.padEnd(width)}${first}`, ...rest.map((l) => `  ${" ".repeat(width)}${l}`)].join("\n");
  });
  return `usage: lmhead <command> [flags]

commands:
${lines.join("\n")}

lmhead <command> --help documents the command's flags.
In a checkout, ./lmhead test runs every test (zig fmt --check, zig build test, the GPU check, the macOS
cross-build, the type check, bun test) and ./lmhead bench times the head per type.`;
}

/** Runs one command line over `commands`; returns the exit code, printing any error as one line. */
export async function runCli(argv: readonly string[], commands: readonly Command[]): Promise<number> {
  try {
    return await dispatch(argv, commands);
  } catch (e) {
    const known = e instanceof UsageError || e instanceof LmheadError;
    const text = e instanceof Error ? e.message : String(e);
    console.error(`lmhead: ${known ? "" : "error: "}${text.split("\n")[0]}`);
    if (process.env.LMHEAD_DEBUG && e instanceof Error && e.stack) console.error(e.stack);
    return e instanceof UsageError ? 2 : 1;
  }
}

async function dispatch(argv: readonly string[], commands: readonly Command[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) {
    console.error(usage(commands));
    return 2;
  }
  if (name === "--help" || name === "-h" || name === "help") {
    console.log(usage(commands));
    return 0;
  }
  const command = commands.find((c) => c.name === name);
  if (!command) throw new UsageError(`unknown command '${name}' (commands: ${commands.map((c) => c.name).join(", ")}; see lmhead --help)`);
  return command.run(rest);
}

if (import.meta.main) process.exitCode = await runCli(process.argv.slice(2), packageCommands);
