//! The x86-64 instruction-set features the CPU kernels' levels depend on, read from this
//! machine's CPUID and from XCR0 (the vector state the OS saves: a CPU can have AVX-512
//! that the OS does not enable).
const std = @import("std");
const Feature = std.Target.x86.Feature;

const Leaf = struct { eax: u32, ebx: u32, ecx: u32, edx: u32 };

fn cpuid(leaf: u32, subleaf: u32) Leaf {
    var eax: u32 = undefined;
    var ebx: u32 = undefined;
    var ecx: u32 = undefined;
    var edx: u32 = undefined;
    asm volatile ("cpuid"
        : [_] "={eax}" (eax),
          [_] "={ebx}" (ebx),
          [_] "={ecx}" (ecx),
          [_] "={edx}" (edx),
        : [_] "{eax}" (leaf),
          [_] "{ecx}" (subleaf),
    );
    return .{ .eax = eax, .ebx = ebx, .ecx = ecx, .edx = edx };
}

fn xcr0() u32 {
    return asm volatile (
        \\ xor %%ecx, %%ecx
        \\ xgetbv
        : [_] "={eax}" (-> u32),
        :
        : .{ .edx = true, .ecx = true });
}

fn bit(word: u32, index: u5) bool {
    return word & (@as(u32, 1) << index) != 0;
}

/// The features among those the levels need that this CPU has and its OS enables.
pub fn features() std.Target.Cpu.Feature.Set {
    var set: std.Target.Cpu.Feature.Set = .empty;
    const add = struct {
        fn f(s: *std.Target.Cpu.Feature.Set, on: bool, feature: Feature) void {
            if (on) s.addFeature(@backingInt(feature));
        }
    }.f;
    const max_leaf = cpuid(0, 0).eax;
    const one = cpuid(1, 0);
    // AVX state (XMM and YMM, XCR0 bits 1-2) and AVX-512 state (opmask, ZMM: bits 5-7).
    const os_avx = bit(one.ecx, 27) and (xcr0() & 0x06) == 0x06;
    const os_avx512 = os_avx and (xcr0() & 0xE6) == 0xE6;
    add(&set, os_avx and bit(one.ecx, 28), .avx);
    add(&set, os_avx and bit(one.ecx, 12), .fma);
    add(&set, os_avx and bit(one.ecx, 29), .f16c);
    if (max_leaf >= 7) {
        const seven = cpuid(7, 0);
        add(&set, bit(seven.ebx, 3), .bmi);
        add(&set, bit(seven.ebx, 8), .bmi2);
        add(&set, os_avx and bit(seven.ebx, 5), .avx2);
        add(&set, os_avx512 and bit(seven.ebx, 16), .avx512f);
        add(&set, os_avx512 and bit(seven.ebx, 17), .avx512dq);
        add(&set, os_avx512 and bit(seven.ebx, 28), .avx512cd);
        add(&set, os_avx512 and bit(seven.ebx, 30), .avx512bw);
        add(&set, os_avx512 and bit(seven.ebx, 31), .avx512vl);
        add(&set, os_avx512 and bit(seven.ecx, 1), .avx512vbmi);
    }
    return set;
}

/// The features `features()` can report: a level needs only these of its own.
pub const known = std.Target.x86.featureSet(&.{ .avx, .fma, .f16c, .bmi, .bmi2, .avx2, .avx512f, .avx512dq, .avx512cd, .avx512bw, .avx512vl, .avx512vbmi });
