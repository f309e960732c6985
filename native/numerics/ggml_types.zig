//! Every ggml tensor type id, with its block size: the one table a GGUF reader needs to find
//! each tensor's extent in the file, whether lmhead decodes the type or only skips over it.
//! formats.zig describes the 14 types lmhead decodes, taking their names and block sizes from here.
//!
//! Sources: ggml.h `enum ggml_type` and ggml.c `type_traits` (ggml-org/llama.cpp), and gguf-py's
//! `GGML_QUANT_SIZES` (gguf/constants.py), which agree on every id they both list.
//! Ids that ggml removed (Q4_2/Q4_3, the pre-repacked Q4_0_x_y and IQ4_NL_x_y) are kept with the
//! block size they had, for the error message: like gguf-py (no entry in GGML_QUANT_SIZES) and
//! llama.cpp (block size 0 in type_traits), lmhead refuses a file that uses one.
const std = @import("std");

pub const TypeInfo = struct {
    id: u32,
    /// ggml's name in upper case, as gguf-py spells it ("Q6_K", "IQ4_XS").
    name: []const u8,
    block_values: u32,
    block_bytes: u32,
    /// Removed from ggml: GGUF readers refuse tensors of this type.
    removed: bool = false,
    /// For removed types: what replaced it.
    replaced_by: ?[]const u8 = null,
};

const qk_k = 256;

/// Indexed by id: table[id].id == id. Ids at or past table.len are unknown.
pub const table = [_]TypeInfo{
    .{ .id = 0, .name = "F32", .block_values = 1, .block_bytes = 4 },
    .{ .id = 1, .name = "F16", .block_values = 1, .block_bytes = 2 },
    .{ .id = 2, .name = "Q4_0", .block_values = 32, .block_bytes = 2 + 16 },
    .{ .id = 3, .name = "Q4_1", .block_values = 32, .block_bytes = 2 + 2 + 16 },
    .{ .id = 4, .name = "Q4_2", .block_values = 16, .block_bytes = 2 + 8, .removed = true, .replaced_by = "Q4_0" },
    .{ .id = 5, .name = "Q4_3", .block_values = 16, .block_bytes = 2 + 2 + 8, .removed = true, .replaced_by = "Q4_1" },
    .{ .id = 6, .name = "Q5_0", .block_values = 32, .block_bytes = 2 + 4 + 16 },
    .{ .id = 7, .name = "Q5_1", .block_values = 32, .block_bytes = 2 + 2 + 4 + 16 },
    .{ .id = 8, .name = "Q8_0", .block_values = 32, .block_bytes = 2 + 32 },
    .{ .id = 9, .name = "Q8_1", .block_values = 32, .block_bytes = 4 + 4 + 32 },
    .{ .id = 10, .name = "Q2_K", .block_values = qk_k, .block_bytes = 2 + 2 + qk_k / 16 + qk_k / 4 },
    .{ .id = 11, .name = "Q3_K", .block_values = qk_k, .block_bytes = 2 + qk_k / 4 + qk_k / 8 + 12 },
    .{ .id = 12, .name = "Q4_K", .block_values = qk_k, .block_bytes = 2 + 2 + qk_k / 2 + 12 },
    .{ .id = 13, .name = "Q5_K", .block_values = qk_k, .block_bytes = 2 + 2 + qk_k / 2 + qk_k / 8 + 12 },
    .{ .id = 14, .name = "Q6_K", .block_values = qk_k, .block_bytes = 2 + qk_k / 2 + qk_k / 4 + qk_k / 16 },
    .{ .id = 15, .name = "Q8_K", .block_values = qk_k, .block_bytes = 4 + qk_k + qk_k / 8 },
    .{ .id = 16, .name = "IQ2_XXS", .block_values = qk_k, .block_bytes = 2 + qk_k / 4 },
    .{ .id = 17, .name = "IQ2_XS", .block_values = qk_k, .block_bytes = 2 + qk_k / 4 + qk_k / 32 },
    .{ .id = 18, .name = "IQ3_XXS", .block_values = qk_k, .block_bytes = 2 + qk_k / 4 + qk_k / 8 },
    .{ .id = 19, .name = "IQ1_S", .block_values = qk_k, .block_bytes = 2 + qk_k / 8 + qk_k / 16 },
    .{ .id = 20, .name = "IQ4_NL", .block_values = 32, .block_bytes = 2 + 16 },
    .{ .id = 21, .name = "IQ3_S", .block_values = qk_k, .block_bytes = 2 + qk_k / 4 + qk_k / 8 + qk_k / 32 + 4 },
    .{ .id = 22, .name = "IQ2_S", .block_values = qk_k, .block_bytes = 2 + qk_k / 4 + qk_k / 16 },
    .{ .id = 23, .name = "IQ4_XS", .block_values = qk_k, .block_bytes = 2 + 2 + qk_k / 2 + qk_k / 64 },
    .{ .id = 24, .name = "I8", .block_values = 1, .block_bytes = 1 },
    .{ .id = 25, .name = "I16", .block_values = 1, .block_bytes = 2 },
    .{ .id = 26, .name = "I32", .block_values = 1, .block_bytes = 4 },
    .{ .id = 27, .name = "I64", .block_values = 1, .block_bytes = 8 },
    .{ .id = 28, .name = "F64", .block_values = 1, .block_bytes = 8 },
    .{ .id = 29, .name = "IQ1_M", .block_values = qk_k, .block_bytes = qk_k / 8 + qk_k / 16 + qk_k / 32 },
    .{ .id = 30, .name = "BF16", .block_values = 1, .block_bytes = 2 },
    .{ .id = 31, .name = "Q4_0_4_4", .block_values = 32, .block_bytes = 18, .removed = true, .replaced_by = "Q4_0 (repacked at run time)" },
    .{ .id = 32, .name = "Q4_0_4_8", .block_values = 32, .block_bytes = 18, .removed = true, .replaced_by = "Q4_0 (repacked at run time)" },
    .{ .id = 33, .name = "Q4_0_8_8", .block_values = 32, .block_bytes = 18, .removed = true, .replaced_by = "Q4_0 (repacked at run time)" },
    .{ .id = 34, .name = "TQ1_0", .block_values = qk_k, .block_bytes = 2 + 4 * 13 },
    .{ .id = 35, .name = "TQ2_0", .block_values = qk_k, .block_bytes = 2 + 64 },
    .{ .id = 36, .name = "IQ4_NL_4_4", .block_values = 32, .block_bytes = 18, .removed = true, .replaced_by = "IQ4_NL (repacked at run time)" },
    .{ .id = 37, .name = "IQ4_NL_4_8", .block_values = 32, .block_bytes = 18, .removed = true, .replaced_by = "IQ4_NL (repacked at run time)" },
    .{ .id = 38, .name = "IQ4_NL_8_8", .block_values = 32, .block_bytes = 18, .removed = true, .replaced_by = "IQ4_NL (repacked at run time)" },
    .{ .id = 39, .name = "MXFP4", .block_values = 32, .block_bytes = 1 + 16 },
    .{ .id = 40, .name = "NVFP4", .block_values = 64, .block_bytes = 4 + 32 },
    .{ .id = 41, .name = "Q1_0", .block_values = 128, .block_bytes = 2 + 16 },
    .{ .id = 42, .name = "Q2_0", .block_values = 64, .block_bytes = 2 + 16 },
};

/// The entry of a ggml type id, removed types included; null for ids ggml never defined.
pub fn info(id: u32) ?TypeInfo {
    if (id >= table.len) return null;
    return table[id];
}

/// Bytes of `values` elements of type `id`, or null if the id is unknown or removed, values is
/// not a whole number of blocks, or the size overflows u64.
pub fn bytesOf(id: u32, values: u64) ?u64 {
    const t = info(id) orelse return null;
    if (t.removed or values % t.block_values != 0) return null;
    return std.math.mul(u64, values / t.block_values, t.block_bytes) catch null;
}

comptime {
    for (table, 0..) |t, i| {
        std.debug.assert(t.id == i);
        std.debug.assert(t.block_values > 0 and t.block_bytes > 0);
        std.debug.assert(t.removed == (t.replaced_by != null));
    }
}

test "the block sizes ggml's C structs have" {
    const expect = std.testing.expectEqual;
    // sizeof(block_*) from ggml-common.h, as literal numbers.
    try expect(@as(u32, 18), info(2).?.block_bytes); // block_q4_0
    try expect(@as(u32, 20), info(3).?.block_bytes); // block_q4_1
    try expect(@as(u32, 84), info(10).?.block_bytes); // block_q2_K
    try expect(@as(u32, 210), info(14).?.block_bytes); // block_q6_K
    try expect(@as(u32, 292), info(15).?.block_bytes); // block_q8_K
    try expect(@as(u32, 56), info(29).?.block_bytes); // block_iq1_m
    try expect(@as(u32, 54), info(34).?.block_bytes); // block_tq1_0
    try expect(@as(u32, 17), info(39).?.block_bytes); // block_mxfp4
    try expect(@as(?TypeInfo, null), info(43));
    try expect(@as(?TypeInfo, null), info(0xFFFF_FFFF));
}

test "bytesOf: whole blocks only, removed types refused, overflow caught" {
    try std.testing.expectEqual(@as(?u64, 2816 / 256 * 210), bytesOf(14, 2816));
    try std.testing.expectEqual(@as(?u64, null), bytesOf(14, 2817));
    try std.testing.expectEqual(@as(?u64, null), bytesOf(31, 32));
    try std.testing.expectEqual(@as(?u64, null), bytesOf(43, 1));
    try std.testing.expectEqual(@as(?u64, null), bytesOf(27, 1 << 62));
    try std.testing.expectEqual(@as(?u64, 0), bytesOf(3, 0));
}
