#!/usr/bin/env bun
/**
 * The command line of a source checkout (what ./lmhead runs): the package's commands
 * (src/cli) plus the ones that ship only with the source, bench and soak.
 */
import { packageCommands, runCli } from "../src/cli/main.ts";
import { benchCommand } from "./head.ts";
import { soakCommand } from "./soak.ts";

process.exitCode = await runCli(process.argv.slice(2), [...packageCommands, benchCommand, soakCommand]);
