//! The backend contract: the one place a new backend has to read.
//!
//! A backend is a type `B` that a device owns one of. `check(B)` verifies at compile time
//! that it declares everything below; `core/device.zig` then dispatches to it with one
//! `inline else`, so no other file names a backend.
//!
//! - `B.name`: the backend's name, as users spell it (`MlxDevice.open("cpu")`).
//! - `B.create() Error!*B`, `B.destroy(*B)`: open and close the backend of one device.
//! - `B.describe(*B, out) []const u8`: one line for users: what runs, how wide.
//! - `B.threads(*B) u32`: host threads the backend runs work on (1 for a GPU's host side).
//! - `B.Memory`: one allocation (owned or wrapped). Buffers hold it; views are windows of it.
//!   `B.alloc(*B, bytes) Error!Memory` (zeroed), `B.wrap(*B, host, bytes) Error!Memory`
//!   (zero-copy over host memory the caller keeps alive, e.g. a mapped file),
//!   `B.free(*B, Memory)`, `B.address(Memory) usize` (for alignment checks).
//! - `B.host_visible: bool`: whether the host can address a buffer's bytes. If so,
//!   `B.hostBytes(Memory) []u8` is the whole allocation; `copyIn`/`copyOut` work either way:
//!   `B.copyIn(*B, Memory, offset_bytes, []const u8) Error!void`,
//!   `B.copyOut(*B, Memory, offset_bytes, []u8) Error!void`.
//! - `B.execute(*B, []const Command, *const Registry) Error!?u64`: runs a finished session's
//!   commands in order and waits; the registry is the device's (its pipelines, if any). A
//!   `.barrier` command marks where the tracker found a conflict: a GPU backend must make
//!   every earlier write visible to every later read there. Returns the
//!   device's own time for the work in ns where it keeps one (a GPU's start and end times),
//!   null where the host's wait is that time (the CPU).
//! - `B.readBandwidth(*B, bytes, passes) Error![2]f64`: the machine's own reference for the
//!   head's floor, bytes per second [with all threads, with one].
//! - `B.fmaRate(*B, passes) Error!f64`: the other floor's reference, f32 fmas per second with
//!   every thread (or the whole GPU): at large N a canonical-order head is bound by its fmas.
//! - Optionally, a backend whose memory the host cannot address (CUDA) declares
//!   `B.pinHost(*B, [*]u8, u64) Error!void` and `B.unpinHost(*B, [*]u8) void`: host memory
//!   it page-locks so that copies into it (a readback) run at the bus's rate. Pinning is a
//!   no-op for backends without them.
//! - Optionally, a backend that compiles a pipeline per kernel (Metal) declares
//!   `B.pipeline_kernels: []const Kernel`, `B.makePipeline(*B, Kernel) Error!*anyopaque` and
//!   `B.releasePipeline(*B, *anyopaque) void`: the device's registry makes and owns them.
const std = @import("std");
const params = @import("../kernels/params.zig");
pub const Buffer = @import("../core/buffer.zig").Buffer;
pub const Registry = @import("../core/registry.zig").Registry;
pub const Kernel = @import("../core/registry.zig").Kernel;

pub const Kind = enum(u32) { cpu = 0, metal = 1, cuda = 2 };

/// Passes a bandwidth probe may take; the probe reports their median.
pub const max_probe_passes = 100;

/// One recorded dispatch, or a barrier the tracker placed between two of them. Every
/// buffer is a window (offset_bytes, bytes) of a root allocation: see `Buffer.root`.
pub const Command = union(enum) {
    barrier,
    rms_norm: struct { input: *Buffer, weight: *Buffer, output: *Buffer, params: params.RmsNorm },
    matvec: struct { input: *Buffer, weight: *Buffer, output: *Buffer, params: params.Matvec },
    softcap: struct { data: *Buffer, params: params.Softcap },
    count_non_finite: struct { data: *Buffer, counts: *Buffer, params: params.CountNonFinite },

    pub const max_buffers = 3;

    /// The buffers a command uses, written into `out`.
    pub fn buffers(command: *const Command, out: *[max_buffers]*Buffer) []*Buffer {
        return switch (command.*) {
            .barrier => out[0..0],
            inline .rms_norm, .matvec => |c| blk: {
                out.* = .{ c.input, c.weight, c.output };
                break :blk out[0..3];
            },
            .softcap => |c| blk: {
                out[0] = c.data;
                break :blk out[0..1];
            },
            .count_non_finite => |c| blk: {
                out[0..2].* = .{ c.data, c.counts };
                break :blk out[0..2];
            },
        };
    }
};

/// Compile-time check that `B` implements the contract above.
pub fn check(comptime B: type) void {
    const Error = @import("../core/status.zig").Error;
    const M = B.Memory;
    expect(B, "name", []const u8);
    expect(B, "host_visible", bool);
    expect(B, "create", fn () Error!*B);
    expect(B, "destroy", fn (*B) void);
    expect(B, "describe", fn (*B, []u8) []const u8);
    expect(B, "threads", fn (*B) u32);
    expect(B, "alloc", fn (*B, u64) Error!M);
    expect(B, "wrap", fn (*B, [*]u8, u64) Error!M);
    expect(B, "free", fn (*B, M) void);
    expect(B, "address", fn (M) usize);
    expect(B, "copyIn", fn (*B, M, u64, []const u8) Error!void);
    expect(B, "copyOut", fn (*B, M, u64, []u8) Error!void);
    expect(B, "execute", fn (*B, []const Command, *const Registry) Error!?u64);
    expect(B, "readBandwidth", fn (*B, u64, u32) Error![2]f64);
    expect(B, "fmaRate", fn (*B, u32) Error!f64);
    if (B.host_visible) expect(B, "hostBytes", fn (M) []u8);
    if (@hasDecl(B, "pinHost") or @hasDecl(B, "unpinHost")) {
        expect(B, "pinHost", fn (*B, [*]u8, u64) Error!void);
        expect(B, "unpinHost", fn (*B, [*]u8) void);
    }
    if (@hasDecl(B, "pipeline_kernels")) {
        expect(B, "pipeline_kernels", []const Kernel);
        expect(B, "makePipeline", fn (*B, Kernel) Error!*anyopaque);
        expect(B, "releasePipeline", fn (*B, *anyopaque) void);
    }
}

fn expect(comptime B: type, comptime decl: []const u8, comptime T: type) void {
    if (!@hasDecl(B, decl)) @compileError(@typeName(B) ++ " lacks `" ++ decl ++ "` of the backend contract");
    const D = @TypeOf(@field(B, decl));
    const ok = if (@typeInfo(T) == .@"fn") D == T else D == T or (T == []const u8 and @typeInfo(D) == .pointer);
    if (!ok) @compileError(@typeName(B) ++ "." ++ decl ++ " is " ++ @typeName(D) ++ ", the contract says " ++ @typeName(T));
}
