/** The decode loop over the batched head: slots, sampling, hidden sources, equivalence. */
export { DecodeLoop, type DecodeLoopOptions, type DecodeReport, type DecodeRequest, type DecodeStats, type RequestResult, type StepEvent, type TokenEvent } from "./loop.ts";
export { EmbeddingHiddenSource, denseEmbedding, type EmbeddingSourceOptions, type EmbeddingTable, type HiddenContext, type HiddenSource } from "./hidden.ts";
export { Sampler, argmax, argmaxRows, greedy, parseSampling, pickTopK, requestRng, samplingText, topKOf, topKRows, type Sampling } from "./sampling.ts";
export { compareBatched, describeEquivalence, serialReference, slotAwareEquivalence, type EquivalenceOptions, type EquivalenceReport, type Mismatch, type SerialReference } from "./equivalence.ts";
export { staggeredRequests, type WorkloadOptions } from "./workload.ts";
export { LogHistogram, type Quantiles } from "./histogram.ts";
