//! Devices (mlx-native's MlxDevice): a backend, its kernel registry and a reference count.
//! Every backend call goes through one `inline else` below; the contract it relies on is
//! `backends/backend.zig`.
const std = @import("std");
const status = @import("status.zig");
const contract = @import("../backends/backend.zig");
const Registry = @import("registry.zig").Registry;
const Command = contract.Command;
const Error = status.Error;
const fail = status.fail;

pub const Kind = contract.Kind;

/// The backends built into this library, each by its kind's name.
const Backends = struct {
    pub const cpu = @import("../backends/cpu/backend.zig").Backend;
    pub const metal = @import("../backends/metal/backend.zig").Backend;
    pub const cuda = @import("../backends/cuda/backend.zig").Backend;
};

comptime {
    for (std.meta.declarations(Backends)) |name| {
        const B = @field(Backends, name);
        contract.check(B);
        std.debug.assert(std.mem.eql(u8, B.name, name) and @hasField(Kind, name));
    }
}

pub const Device = struct {
    kind: Kind,
    backend: Backend,
    registry: Registry = .{},
    refs: std.atomic.Value(u32) = .init(1),

    pub const Backend = union(enum) { cpu: *Backends.cpu, metal: *Backends.metal, cuda: *Backends.cuda };
    pub const Memory = union(enum) { cpu: Backends.cpu.Memory, metal: Backends.metal.Memory, cuda: Backends.cuda.Memory };

    pub fn open(kind: Kind) Error!*Device {
        const backend: Backend = switch (kind) {
            inline else => |k| if (@hasDecl(Backends, @tagName(k)))
                @unionInit(Backend, @tagName(k), try @field(Backends, @tagName(k)).create())
            else
                return fail(error.Unsupported, "the {s} backend is not built into this library", .{@tagName(k)}),
        };
        const device = std.heap.c_allocator.create(Device) catch {
            switch (backend) {
                inline else => |b| b.destroy(),
            }
            return fail(error.OutOfMemory, "out of memory opening a device", .{});
        };
        device.* = .{ .kind = kind, .backend = backend };
        switch (backend) {
            inline else => |b| if (@hasDecl(@TypeOf(b.*), "pipeline_kernels")) {
                device.registry.makePipelines(b, @TypeOf(b.*).pipeline_kernels) catch |e| {
                    b.destroy();
                    std.heap.c_allocator.destroy(device);
                    return e;
                };
            },
        }
        return device;
    }

    pub fn retain(device: *Device) void {
        const before = device.refs.fetchAdd(1, .monotonic);
        std.debug.assert(before > 0);
    }

    pub fn release(device: *Device) void {
        const before = device.refs.fetchSub(1, .acq_rel);
        std.debug.assert(before > 0);
        if (before != 1) return;
        switch (device.backend) {
            inline else => |b| {
                if (@hasDecl(@TypeOf(b.*), "pipeline_kernels")) device.registry.releasePipelines(b);
                b.destroy();
            },
        }
        std.heap.c_allocator.destroy(device);
    }

    pub fn hostVisible(device: *Device) bool {
        return switch (device.backend) {
            inline else => |b| @TypeOf(b.*).host_visible,
        };
    }

    pub fn threads(device: *Device) u32 {
        return switch (device.backend) {
            inline else => |b| b.threads(),
        };
    }

    pub fn describe(device: *Device, out: []u8) []const u8 {
        return switch (device.backend) {
            inline else => |b| b.describe(out),
        };
    }

    pub fn alloc(device: *Device, bytes: u64) Error!Memory {
        return switch (device.backend) {
            inline else => |b, tag| @unionInit(Memory, @tagName(tag), try b.alloc(bytes)),
        };
    }

    pub fn wrap(device: *Device, host: [*]u8, bytes: u64) Error!Memory {
        return switch (device.backend) {
            inline else => |b, tag| @unionInit(Memory, @tagName(tag), try b.wrap(host, bytes)),
        };
    }

    pub fn free(device: *Device, memory: Memory) void {
        switch (device.backend) {
            inline else => |b, tag| b.free(@field(memory, @tagName(tag))),
        }
    }

    pub fn address(device: *Device, memory: Memory) usize {
        return switch (device.backend) {
            inline else => |b, tag| @TypeOf(b.*).address(@field(memory, @tagName(tag))),
        };
    }

    /// The whole allocation's bytes where the backend's memory is host-visible, else null.
    pub fn hostBytes(device: *Device, memory: Memory) ?[]u8 {
        return switch (device.backend) {
            inline else => |b, tag| if (@TypeOf(b.*).host_visible) @TypeOf(b.*).hostBytes(@field(memory, @tagName(tag))) else null,
        };
    }

    pub fn copyIn(device: *Device, memory: Memory, offset_bytes: u64, src: []const u8) Error!void {
        switch (device.backend) {
            inline else => |b, tag| try b.copyIn(@field(memory, @tagName(tag)), offset_bytes, src),
        }
    }

    pub fn copyOut(device: *Device, memory: Memory, offset_bytes: u64, dst: []u8) Error!void {
        switch (device.backend) {
            inline else => |b, tag| try b.copyOut(@field(memory, @tagName(tag)), offset_bytes, dst),
        }
    }

    /// Page-locks host memory for the backend's copies, where it has such a notion.
    pub fn pinHost(device: *Device, host: [*]u8, bytes: u64) Error!void {
        switch (device.backend) {
            inline else => |b| if (@hasDecl(@TypeOf(b.*), "pinHost")) try b.pinHost(host, bytes),
        }
    }

    pub fn unpinHost(device: *Device, host: [*]u8) void {
        switch (device.backend) {
            inline else => |b| if (@hasDecl(@TypeOf(b.*), "unpinHost")) b.unpinHost(host),
        }
    }

    /// Runs the commands and waits; the device's own time for them in ns, where it keeps one.
    pub fn execute(device: *Device, commands: []const Command) Error!?u64 {
        return switch (device.backend) {
            inline else => |b| try b.execute(commands, &device.registry),
        };
    }

    pub fn fmaRate(device: *Device, passes: u32) Error!f64 {
        return switch (device.backend) {
            inline else => |b| try b.fmaRate(passes),
        };
    }

    pub fn readBandwidth(device: *Device, bytes: u64, passes: u32) Error![2]f64 {
        return switch (device.backend) {
            inline else => |b| try b.readBandwidth(bytes, passes),
        };
    }
};

const handles = @import("handles.zig");
/// Devices are cheap (CPU devices share one thread pool), so a generous table.
pub var devices: handles.Table(Device, .device, 1024) = .{};
