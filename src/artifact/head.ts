// What the output head needs from a GGUF artifact (hf2q-head-spec.md §1, §4, §7, §8.8–8.9):
// final norm weight, lm_head weight in its stored type (tied to token_embd when there is no
// output.weight: same bytes, no copy, no √hidden scaling), eps and the optional softcap.
import { LmheadError } from "../errors.ts";
import { formatInfo, type FormatInfo } from "../formats.ts";
import { metaNumber, metaString, readGguf, tensorData, type GgufFile, type GgufTensor } from "./gguf.ts";

/** A structurally valid GGUF that is not a usable head artifact. */
export class ArtifactError extends LmheadError {
  readonly file: string;
  constructor(file: string, problem: string) {
    super("bad_artifact", `${file}: ${problem}`);
    this.file = file;
  }
}

export interface HeadOptions {
  /** Accept a gemma4 artifact without `gemma4.final_logit_softcapping` (softcap off). */
  allowMissingSoftcap?: boolean;
}

export interface ResolvedHead {
  file: string;
  arch: string;
  hidden: number;
  vocab: number;
  eps: number;
  /** null: no softcap step. */
  softcap: number | null;
  norm: { name: string; bytes: Uint8Array };
  head: { name: string; typeId: number; format: FormatInfo; bytes: Uint8Array; tied: boolean };
  /** Owner of the mapping that `norm.bytes` and `head.bytes` view; keep it alive while they are used. */
  mapping: Uint8Array;
}

const NORM = "output_norm.weight";
const OUTPUT = "output.weight";
const TOKEN_EMBD = "token_embd.weight";
const F32 = 0;

export function resolveHead(gguf: GgufFile, opts: HeadOptions = {}): ResolvedHead {
  const file = gguf.file;
  const fail = (problem: string): never => {
    throw new ArtifactError(file, problem);
  };

  const arch = metaString(gguf, "general.architecture") ?? fail("missing metadata 'general.architecture'");

  const epsKey = `${arch}.attention.layer_norm_rms_epsilon`;
  const eps = metaNumber(gguf, epsKey) ?? fail(`missing metadata '${epsKey}'`);
  if (!Number.isFinite(eps) || eps <= 0) fail(`'${epsKey}' is ${eps}, expected a finite value > 0`);

  // Gemma 4 without the softcap key once ran silently uncapped (§8.8), so there it must be explicit.
  const capKey = `${arch}.final_logit_softcapping`;
  const cap = metaNumber(gguf, capKey);
  let softcap: number | null = null;
  if (cap !== undefined) {
    if (!Number.isFinite(cap) || cap <= 0) fail(`'${capKey}' is ${cap}, expected a finite value > 0`);
    softcap = cap;
  } else if (arch === "gemma4" && !opts.allowMissingSoftcap) {
    fail(`missing metadata '${capKey}' (a gemma4 head is softcapped; pass allowMissingSoftcap to run without)`);
  }

  const output = gguf.tensors.get(OUTPUT);
  const headTensor = output ?? gguf.tensors.get(TOKEN_EMBD) ?? fail(`neither '${OUTPUT}' nor '${TOKEN_EMBD}' is in the file`);
  const tied = output === undefined;
  const format = formatInfo(headTensor.typeId) ?? fail(`'${headTensor.name}' has ggml type ${headTensor.typeId}, which lmhead does not know`);
  if (tied && !format.tiedHead) {
    fail(`tied head '${TOKEN_EMBD}' is stored as ${format.name}, which is not admitted for a tied head (hf2q rejects stored ${format.name} embeddings)`);
  }
  if (!tied && !format.head) fail(`'${OUTPUT}' is stored as ${format.name}, which is not admitted for the head`);
  if (headTensor.dims.length !== 2) fail(`'${headTensor.name}' must be rank 2 [hidden, vocab], has dims ${dimsText(headTensor)}`);
  const [hidden, vocab] = headTensor.dims;
  if (hidden === 0 || vocab === 0) fail(`'${headTensor.name}' has an empty dimension ${dimsText(headTensor)}`);
  if (hidden % format.blockValues !== 0) fail(`hidden ${hidden} is not a multiple of the ${format.name} block (${format.blockValues})`);

  const declaredHidden = metaNumber(gguf, `${arch}.embedding_length`);
  if (declaredHidden !== undefined && declaredHidden !== hidden) {
    fail(`'${arch}.embedding_length' is ${declaredHidden} but '${headTensor.name}' rows have ${hidden} values`);
  }

  const norm = gguf.tensors.get(NORM) ?? fail(`missing tensor '${NORM}'`);
  if (norm.typeId !== F32) {
    fail(`'${NORM}' must have exact F32 storage, found ${formatInfo(norm.typeId)?.name ?? `ggml type ${norm.typeId}`}`);
  }
  if (norm.dims.length !== 1 || norm.dims[0] !== hidden) fail(`'${NORM}' must be [${hidden}], has dims ${dimsText(norm)}`);

  // Native kernels read f32 norm values (and f16 scales) in place; with general.alignment < 4
  // a tensor could start at an odd address.
  for (const t of [norm, headTensor]) {
    if (t.fileOffset % 4 !== 0) fail(`'${t.name}' data is not 4-byte aligned (general.alignment ${gguf.alignment})`);
  }

  return {
    file,
    arch,
    hidden,
    vocab,
    eps,
    softcap,
    norm: { name: NORM, bytes: tensorData(gguf, norm) },
    head: { name: headTensor.name, typeId: headTensor.typeId, format, bytes: tensorData(gguf, headTensor), tied },
    mapping: gguf.mapping,
  };
}

/** Maps `path` and resolves its head. */
export function loadHead(path: string, opts: HeadOptions = {}): ResolvedHead {
  return resolveHead(readGguf(path), opts);
}

function dimsText(t: GgufTensor): string {
  return `[${t.dims.join(", ")}]`;
}
