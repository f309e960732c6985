// What the output head needs from a GGUF artifact (hf2q-head-spec.md §1, §4, §7, §8.8–8.9):
// final norm weight, lm_head weight in its stored type (tied to token_embd when there is no
// output.weight: same bytes, no copy, no √hidden scaling), eps and the optional softcap.
import { LmheadError } from "../errors.ts";
import { admitHead, formatInfo, typeInfo, type FormatInfo } from "../formats.ts";
import { metaNumber, metaString, readGguf, type GgufFile, type GgufTensor } from "./gguf.ts";

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
  /** As f32, the value the kernels compute with. */
  eps: number;
  /** As f32; null: no softcap step. */
  softcap: number | null;
  norm: GgufTensor;
  head: GgufTensor & { format: FormatInfo; tied: boolean };
  /**
   * Rows of the token embedding, for hidden-row sources that start from a token: the head when
   * tied, token_embd.weight when untied and decodable (with at least the head's vocab, so every
   * token the head can produce has one), else the head's own rows.
   */
  embedding: { tensor: GgufTensor; format: FormatInfo; vocab: number };
  /** The parsed file the tensors belong to (tensorData reads them). */
  gguf: GgufFile;
}

const NORM = "output_norm.weight";
const OUTPUT = "output.weight";
const TOKEN_EMBD = "token_embd.weight";
const F32 = 0;
// The smallest positive normal and the largest finite f32.
const MIN_NORMAL_F32 = 2 ** -126;
const MAX_F32 = Math.fround(3.4028234663852886e38);

export function resolveHead(gguf: GgufFile, opts: HeadOptions = {}): ResolvedHead {
  const file = gguf.file;
  const fail = (problem: string): never => {
    throw new ArtifactError(file, problem);
  };

  const arch = metaString(gguf, "general.architecture") ?? fail("missing metadata 'general.architecture'");

  const epsKey = `${arch}.attention.layer_norm_rms_epsilon`;
  const eps = positiveF32(epsKey, metaNumber(gguf, epsKey) ?? fail(`missing metadata '${epsKey}'`), fail);

  // Gemma 4 without the softcap key once ran silently uncapped (§8.8), so there it must be explicit.
  const capKey = `${arch}.final_logit_softcapping`;
  const cap = metaNumber(gguf, capKey);
  const softcap = cap === undefined ? null : positiveF32(capKey, cap, fail);
  if (cap === undefined && arch === "gemma4" && !opts.allowMissingSoftcap) {
    fail(`missing metadata '${capKey}' (a gemma4 head is softcapped; pass allowMissingSoftcap to run without)`);
  }

  const output = gguf.tensors.get(OUTPUT);
  const headTensor = output ?? gguf.tensors.get(TOKEN_EMBD) ?? fail(`neither '${OUTPUT}' nor '${TOKEN_EMBD}' is in the file`);
  const tied = output === undefined;
  if (headTensor.dims.length !== 2) fail(`'${headTensor.name}' must be rank 2 [hidden, vocab], has dims ${dimsText(headTensor)}`);
  const [hidden, vocab] = headTensor.dims as [number, number];
  try {
    admitHead(headTensor.typeId, hidden, vocab, headTensor.bytes, tied);
  } catch (e) {
    fail(`'${headTensor.name}' ${dimsText(headTensor)}: ${(e as Error).message}`);
  }
  const format = formatInfo(headTensor.typeId)!;

  const declaredHidden = metaNumber(gguf, `${arch}.embedding_length`);
  if (declaredHidden !== undefined && declaredHidden !== hidden) {
    fail(`'${arch}.embedding_length' is ${declaredHidden} but '${headTensor.name}' rows have ${hidden} values`);
  }

  const norm = gguf.tensors.get(NORM) ?? fail(`missing tensor '${NORM}'`);
  if (norm.typeId !== F32) {
    fail(`'${NORM}' must have exact F32 storage, found ${typeInfo(norm.typeId)?.name ?? `ggml type ${norm.typeId}`}`);
  }
  if (norm.dims.length !== 1 || norm.dims[0] !== hidden) fail(`'${NORM}' must be [${hidden}], has dims ${dimsText(norm)}`);

  // Native kernels read f32 norm values (and f16 scales) in place, and dense head rows of a
  // multiple of 16 bytes 16 bytes at a time; with general.alignment < 16 a tensor could start
  // at an address they cannot load from.
  const wideRows = format.blockValues === 1 && (hidden * format.blockBytes) % 16 === 0;
  for (const t of [norm, headTensor]) {
    const bytes = t === headTensor && wideRows ? 16 : 4;
    if (t.fileOffset % bytes !== 0) fail(`'${t.name}' data is not ${bytes}-byte aligned (general.alignment ${gguf.alignment})`);
  }

  const head = { ...headTensor, format, tied };
  return { file, arch, hidden, vocab, eps, softcap, norm, head, embedding: resolveEmbedding(gguf, head, vocab, fail), gguf };
}

/** A positive metadata number as the f32 the kernels use: refused if f32 makes it 0, subnormal or infinite. */
function positiveF32(key: string, value: number, fail: (problem: string) => never): number {
  const f = Math.fround(value);
  if (!(f >= MIN_NORMAL_F32 && f <= MAX_F32)) {
    const asF32 = f === value ? "" : ` (${f} as f32, the precision lmhead computes in)`;
    fail(`'${key}' is ${value}${asF32}, expected a finite value > 0 that f32 holds as a normal number`);
  }
  return f;
}

function resolveEmbedding(gguf: GgufFile, head: ResolvedHead["head"], vocab: number, fail: (problem: string) => never): ResolvedHead["embedding"] {
  const headRows = { tensor: head, format: head.format, vocab };
  const embd = gguf.tensors.get(TOKEN_EMBD);
  if (head.tied || embd === undefined) return headRows;
  const format = formatInfo(embd.typeId);
  // A table lmhead cannot decode, or not of the head's rows, is not used: the head's rows stand in.
  if (format === undefined || embd.dims.length !== 2 || embd.dims[0] !== head.dims[0]) return headRows;
  const rows = embd.dims[1]!;
  if (rows < vocab) {
    fail(`'${TOKEN_EMBD}' has ${rows} rows but '${OUTPUT}' has vocab ${vocab}: tokens ${rows}..${vocab - 1}, which the head can produce, would have no embedding`);
  }
  return { tensor: embd, format, vocab: rows };
}

/** Maps `path` and resolves its head. */
export function loadHead(path: string, opts: HeadOptions = {}): ResolvedHead {
  return resolveHead(readGguf(path), opts);
}

function dimsText(t: GgufTensor): string {
  return `[${t.dims.join(", ")}]`;
}
