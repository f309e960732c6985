#!/usr/bin/env bun
/**
 * The command line of a source checkout (what ./lmhead runs): the package's commands
 * (src/cli) plus the one that ships only with the source, bench.
 */
import { packageCommands, runCli } from "../src/cli/main.ts";
import { benchCommand } from "./head.ts";

process.exitCode = await runCli(process.argv.slice(2), [...packageCommands, benchCommand]);
