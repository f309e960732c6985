//! The prebuilt macOS library, checked from Linux: build.zig cross-builds liblmhead.dylib
//! for aarch64-macos and embeds it here. A Bun user on a Mac loads it with no SDK, so it
//! must load libSystem and nothing else (Metal, Foundation, CoreGraphics and libobjc are
//! opened with dlopen at run time), and export every `lmh_` function of root.zig.
const std = @import("std");
const macho = std.macho;

const dylib = @embedFile("macos_dylib");
const root_source = @embedFile("../../root.zig");

const libsystem = "/usr/lib/libSystem.B.dylib";
const cpu_type_arm64: i32 = 0x0100000c;
const mh_dylib = 6;

fn int(comptime T: type, offset: usize) T {
    return std.mem.readInt(T, dylib[offset..][0..@sizeOf(T)], .little);
}

/// Each load command as (cmd, offset of the command in the file).
const Commands = struct {
    offset: usize = @sizeOf(macho.mach_header_64),
    left: u32 = int(u32, @offsetOf(macho.mach_header_64, "ncmds")),

    fn next(it: *Commands) ?struct { cmd: u32, offset: usize } {
        if (it.left == 0) return null;
        const here = it.offset;
        it.offset += int(u32, here + 4);
        it.left -= 1;
        return .{ .cmd = int(u32, here), .offset = here };
    }
};

fn isLoad(cmd: u32) bool {
    const loads = [_]macho.LC{ .LOAD_DYLIB, .LOAD_WEAK_DYLIB, .REEXPORT_DYLIB, .LAZY_LOAD_DYLIB, .LOAD_UPWARD_DYLIB };
    for (loads) |l| if (cmd == @backingInt(l)) return true;
    return false;
}

test "the aarch64-macos dylib is an arm64 dylib that loads libSystem only" {
    try std.testing.expectEqual(macho.MH_MAGIC_64, int(u32, 0));
    try std.testing.expectEqual(cpu_type_arm64, int(i32, 4));
    try std.testing.expectEqual(@as(u32, mh_dylib), int(u32, 12));
    var loaded: u32 = 0;
    var it: Commands = .{};
    while (it.next()) |c| {
        if (!isLoad(c.cmd)) continue;
        const name_offset = int(u32, c.offset + @offsetOf(macho.dylib_command, "dylib"));
        const name = std.mem.sliceTo(dylib[c.offset + name_offset ..], 0);
        if (!std.mem.eql(u8, name, libsystem)) {
            std.debug.print("liblmhead.dylib loads {s}; only {s} may be linked\n", .{ name, libsystem });
            return error.TestUnexpectedResult;
        }
        loaded += 1;
    }
    try std.testing.expectEqual(@as(u32, 1), loaded);
}

/// Whether the symbol table defines and exports `name` (with Mach-O's leading underscore).
fn exports(name: []const u8) bool {
    var it: Commands = .{};
    while (it.next()) |c| {
        if (c.cmd != @backingInt(macho.LC.SYMTAB)) continue;
        const symbols = int(u32, c.offset + @offsetOf(macho.symtab_command, "symoff"));
        const count = int(u32, c.offset + @offsetOf(macho.symtab_command, "nsyms"));
        const strings = int(u32, c.offset + @offsetOf(macho.symtab_command, "stroff"));
        for (0..count) |i| {
            const entry = symbols + i * @sizeOf(macho.nlist_64);
            const n_type = dylib[entry + 4];
            const defined_external = n_type & macho.N_EXT != 0 and n_type & macho.N_TYPE == macho.N_SECT;
            const symbol = std.mem.sliceTo(dylib[strings + int(u32, entry) ..], 0);
            if (defined_external and symbol.len == name.len + 1 and symbol[0] == '_' and std.mem.eql(u8, symbol[1..], name)) return true;
        }
    }
    return false;
}

test "the aarch64-macos dylib exports every lmh_ function of root.zig" {
    var checked: u32 = 0;
    var lines = std.mem.tokenizeScalar(u8, root_source, '\n');
    while (lines.next()) |line| {
        const prefix = "pub export fn ";
        if (!std.mem.startsWith(u8, line, prefix)) continue;
        const name = line[prefix.len..std.mem.indexOfScalar(u8, line, '(').?];
        if (!exports(name)) {
            std.debug.print("liblmhead.dylib does not export {s}\n", .{name});
            return error.TestUnexpectedResult;
        }
        checked += 1;
    }
    try std.testing.expect(checked >= 20);
    try std.testing.expect(!exports("lmh_no_such_function"));
}
