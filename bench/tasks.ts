/**
 * The bench's timer: named tasks run in the order given, each `warmup` times and then
 * `iterations` measured times (tinybench, timestamps from Bun.nanoseconds); each task's
 * latency statistics in ms.
 */
import { Bench, type Statistics } from "tinybench";

export interface TimedTask {
  name: string;
  run: () => void;
}

export async function timeTasks(
  label: string,
  tasks: readonly TimedTask[],
  o: { iterations: number; warmup: number },
  onTaskDone: (name: string) => void = () => {},
): Promise<Map<string, Statistics>> {
  const bench = new Bench({
    name: label,
    timestampProvider: "bunNanoseconds",
    time: 0,
    iterations: o.iterations,
    warmup: o.warmup > 0,
    warmupTime: 0,
    warmupIterations: o.warmup,
    throws: true,
  });
  for (const task of tasks) bench.add(task.name, task.run, { async: false });
  bench.addEventListener("cycle", (e) => onTaskDone(e.task?.name ?? ""));
  await bench.run();
  const out = new Map<string, Statistics>();
  for (const task of tasks) {
    const r = bench.getTask(task.name)!.result;
    if (r.state !== "completed") throw new Error(`bench ${label} ${task.name}: ${r.state === "errored" ? r.error.message : r.state}`);
    out.set(task.name, r.latency);
  }
  return out;
}
