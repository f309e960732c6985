//! The one admission predicate for an output head: the 1-row and the N-row
//! calls, the loader and every encode go through it, so they can never disagree.
const std = @import("std");
const status = @import("status.zig");
const formats = @import("../numerics/formats.zig");
const Error = status.Error;
const fail = status.fail;

pub const max_rows = 1 << 16;
pub const max_hidden = 1 << 20;
pub const max_vocab = 1 << 24;

pub fn admitHead(type_id: u32, hidden: u64, vocab: u64, weight_bytes: u64, tied: bool) Error!formats.Format {
    const format = formats.format(type_id) orelse
        return fail(error.Unsupported, "unknown or unsupported ggml type id {d} for an output head", .{type_id});
    if (!format.head) return fail(error.Unsupported, "type {s} is not admitted as an output head", .{format.name});
    if (tied and !format.tied_head)
        return fail(error.Unsupported, "tied head of stored type {s}: the token embedding gather does not decode {s}, so it cannot be a tied head", .{ format.name, format.name });
    try checkDims(hidden, vocab);
    if (hidden % format.block_values != 0)
        return fail(error.InvalidArgument, "hidden {d} is not a multiple of the {s} block of {d} values", .{ hidden, format.name, format.block_values });
    const row_bytes = formats.rowBytes(format.type, hidden).?;
    const expected = std.math.mul(u64, row_bytes, vocab) catch return fail(error.Overflow, "head of {d}x{d} overflows", .{ vocab, hidden });
    if (weight_bytes != expected)
        return fail(error.InvalidArgument, "{s} head weight is {d} bytes, expected {d} for vocab {d} x hidden {d}", .{ format.name, weight_bytes, expected, vocab, hidden });
    return format;
}

pub fn checkDims(hidden: u64, vocab: u64) Error!void {
    if (hidden == 0 or hidden > max_hidden) return fail(error.OutOfBounds, "hidden {d} outside [1, {d}]", .{ hidden, max_hidden });
    if (vocab == 0 or vocab > max_vocab) return fail(error.OutOfBounds, "vocab {d} outside [1, {d}]", .{ vocab, max_vocab });
}

pub fn checkRows(rows: u64) Error!void {
    if (rows == 0 or rows > max_rows) return fail(error.OutOfBounds, "rows {d} outside [1, {d}]", .{ rows, max_rows });
}
