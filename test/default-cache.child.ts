// Run by default-cache.test.ts in a child process (inside a private mount namespace): asks for
// the default artifact in $LMHEAD_CACHE and prints the outcome as one JSON line.
import { LmheadError } from "../src/errors.ts";
import { defaultArtifactPath } from "../src/artifact/default.ts";

try {
  console.log(JSON.stringify({ path: await defaultArtifactPath() }));
} catch (e) {
  if (!(e instanceof LmheadError)) throw e;
  console.log(JSON.stringify({ error: { code: e.code, message: e.message } }));
}
