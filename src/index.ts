export { LmheadError, type ErrorCode } from "./errors.ts";
export { dequantize, formatInfo, knownTypeIds, rowBytes, typeIdOf, type FormatInfo } from "./formats.ts";
export { MlxDevice, MlxBuffer, HostPin, KernelRegistry, GraphSession, backendKinds, counters, setEncodeTrace, type BackendKind, type BandwidthResult } from "./runtime.ts";
export { MlxModelWeights, BatchedHeadOut, NonFiniteRowsError, type HeadWeights, type EncodedHead } from "./head.ts";
export { hostPhases, HostPhases, phases, type Phase } from "./phases.ts";
export { loadModel, type Model, type EmbeddingTable, type LoadOptions } from "./model.ts";
export { readGgufHeader, GgufError, type GgufHeader } from "./artifact/gguf.ts";
export { resolveHead, ArtifactError } from "./artifact/head.ts";
export { defaultArtifactPath } from "./artifact/default.ts";
export {
  DecodeLoop,
  EmbeddingHiddenSource,
  parseSampling,
  slotAwareEquivalence,
  type DecodeLoopOptions,
  type DecodeRequest,
  type DecodeReport,
  type DecodeStats,
  type RequestResult,
  type StepEvent,
  type TokenEvent,
  type HiddenSource,
  type Sampling,
} from "./decode/index.ts";
