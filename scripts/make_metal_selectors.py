#!/usr/bin/env python3
"""Writes test/fixtures/metal_selectors.txt: every Objective-C message Apple's metal-cpp
headers send (selector, return type, argument types) and every class they look up, so a
Zig test can check each prototype of native/backends/metal/objc.zig against Apple's
declarations with no Mac.

Usage: scripts/make_metal_selectors.py <metal-cpp checkout> [commit]

Pinned input: github.com/MattGuerrette/metalcpp at 6c6c49b (Apple's metal-cpp for the
Xcode 26 SDK, which has setMathMode:). Types are normalized to the C types the ABI sees:
object pointers are `id`, NS::UInteger and NSUInteger-backed enums `NSUInteger`, NS::Integer
and its enums `NSInteger`, blocks `block`, CFTimeInterval `double`, MTL::Size `MTLSize`.
"""
import pathlib
import re
import sys


def enum_types(root):
    """Enum and option names of metal-cpp -> their underlying integer type."""
    table = {}
    pattern = re.compile(r"_(?:MTL|NS|MTLFX|CA)_(?:ENUM|OPTIONS)\(\s*((?:NS::)?\w+)\s*,\s*(\w+)\s*\)")
    for header in sorted(root.glob("*/*.hpp")):
        for underlying, name in pattern.findall(header.read_text()):
            table[name] = underlying.replace("NS::", "")
    return table


def normalize(text, enums):
    t = re.sub(r"\b(const|class|struct)\b", " ", text).replace(" ", "")
    if "(^" in t:
        return "block"
    stars = len(t) - len(t.rstrip("*"))
    base = t.rstrip("*")
    short = base.split("::")[-1]
    if stars == 0:
        if short in ("UInteger", "NSUInteger"):
            return "NSUInteger"
        if short in ("Integer", "NSInteger"):
            return "NSInteger"
        if short in ("bool", "BOOL"):
            return "bool"
        if short in ("CFTimeInterval", "double", "TimeInterval"):
            return "double"
        if base == "MTL::Size":
            return "MTLSize"
        if short in enums:
            return {"UInteger": "NSUInteger", "Integer": "NSInteger"}.get(enums[short], enums[short])
        return short
    if base in ("char",):
        return "char" + "*" * stars
    if base in ("void",):
        return "void" + "*" * stars
    if base.startswith(("NS::", "MTL::", "MTL4::", "CA::")) or base in ("_Class", "Object"):
        return "id" + "*" * (stars - 1)
    return base + "*" * stars


def split_params(text):
    """Splits a parameter list at top-level commas."""
    params, depth, current = [], 0, ""
    for c in text:
        if c in "(<":
            depth += 1
        elif c in ")>":
            depth -= 1
        if c == "," and depth == 0:
            params.append(current)
            current = ""
        else:
            current += c
    if current.strip():
        params.append(current)
    return [p.strip() for p in params]


def param_name_and_type(param):
    block = re.match(r".*\(\^\s*(\w+)\s*\)", param)
    if block:
        return block.group(1), param
    m = re.match(r"(.*?[\w*&>])\s*\b(\w+)\s*$", param)
    return (m.group(2), m.group(1)) if m else (param, param)


DEFINITION = re.compile(r"_(?:MTL|NS)_INLINE\s+(?P<ret>[^\n]*?)\s*(?P<owner>[\w:]+(?:<[^>]*>)?)::(?P<method>\w+)\(")


def definitions(text):
    """(return type, parameter list, body) of every inline method definition."""
    for d in DEFINITION.finditer(text):
        depth, i = 1, d.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        body_start = text.find("{", i)
        body_end = text.find("\n}", body_start)
        owner = re.sub(r"<.*>", "", d.group("owner"))
        yield owner, d.group("ret"), text[d.end() : i - 1], text[body_start:body_end]
SEND = re.compile(r"sendMessage(?:Safe)?<[^>]*>\(\s*(?P<target>[^,]+),\s*_(?:MTL|NS)_PRIVATE_SEL\((?P<sel>\w+)\)(?P<args>[^;]*)\)\s*;")


def main():
    root = pathlib.Path(sys.argv[1])
    commit = sys.argv[2] if len(sys.argv) > 2 else "unknown"
    enums = enum_types(root)
    lines, classes = set(), set()
    for header in sorted(list(root.glob("Metal/*.hpp")) + list(root.glob("Foundation/*.hpp"))):
        text = header.read_text()
        classes.update(re.findall(r"_(?:MTL|NS)_PRIVATE_DEF_CLS\((\w+)\)", text))
        for owner, ret_text, params_text, body in definitions(text):
            send = SEND.search(body)
            if not send:
                continue
            # Each argument sent is one of the method's parameters, by name; its type is
            # the parameter's (static helpers also take the receiver as a parameter).
            params = dict(param_name_and_type(p) for p in split_params(params_text) if p and p != "void")
            sent = [a.strip() for a in split_params(send.group("args").lstrip(","))]
            if any(a not in params for a in sent):
                continue
            selector = send.group("sel").replace("_", ":")
            ret = normalize(re.sub(r"template\s*<[^>]*>", "", ret_text), enums)
            args = ",".join(normalize(params[a], enums) for a in sent)
            lines.add(f"message\t{owner}\t{selector}\t{ret}\t{args}")
    out = pathlib.Path(__file__).resolve().parent.parent / "test/fixtures/metal_selectors.txt"
    with out.open("w") as f:
        f.write(f"# Generated by scripts/make_metal_selectors.py from metal-cpp {commit}; do not edit.\n")
        f.write("# message<TAB>C++ class<TAB>selector<TAB>return<TAB>arguments (after id, SEL); class<TAB>name\n")
        for c in sorted(classes):
            f.write(f"class\t{c}\n")
        for line in sorted(lines):
            f.write(line + "\n")
    print(f"{out}: {len(classes)} classes, {len(lines)} messages")


if __name__ == "__main__":
    main()
