#!/usr/bin/env python3
"""Fails when a package reaches up: an #include or a BUILD dependency from a
folder to a folder on the same or a higher layer.

The layers, bottom first (docs/ARCHITECTURE.md draws them):

  0 core/                 status macros, tensors, buffer pool, tracing, JSON, files
  1 graph/ comm/ data/    the format and IR; communicators; data loaders
    device/               devices, streams, events; the sim and CUDA backends; the caching allocator
  2 compress/ coded/      gradient codecs; coded computing's codes (on comm/'s communicator)
  3 ops/                  op registry, shape inference, validation, kernels
  4 passes/ schedulers/   graph rewrites; executor, progress, collective engine
  5 plan/                 BuildPlan: a model and a pipeline to every rank's graph
  6 runtime/ runtime/launcher/   the trainer, checkpoints; local processes
    timing/ benchmarks/   offline timing models and trace analysis; what `nereid bench` measures
  7 runtime/cli/          the nereid command

A file may use its own folder and any folder on a lower layer; two folders
on one layer stay apart. tests/, bench/ and models/ sit above everything and
are not checked. Run from anywhere: `python3 tests/check_layers.py`;
`--self-test` proves the check can fail.
"""
import os
import re
import sys
import tempfile

LAYERS = {
    'core': 0,
    'graph': 1, 'comm': 1, 'data': 1, 'device': 1,
    'compress': 2, 'coded': 2,
    'ops': 3,
    'passes': 4, 'schedulers': 4,
    'plan': 5,
    'runtime': 6, 'runtime/launcher': 6, 'timing': 6, 'benchmarks': 6,
    'runtime/cli': 7,
}
UNCHECKED = ('tests', 'bench', 'models', 'third_party', 'docs')
SOURCE_EXT = ('.cc', '.h', '.cu', '.proto')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"|^\s*import\s+"([^"]+)"\s*;', re.M)
LABEL = re.compile(r'"//([A-Za-z0-9_/]*)[:"]')


def folder_of(path):
    """The layered folder a repository path belongs to (longest match), or None."""
    parts = path.split('/')
    for n in range(len(parts) - 1, 0, -1):
        candidate = '/'.join(parts[:n])
        if candidate in LAYERS:
            return candidate
    return None


def arrows(root):
    """(from_file, line, target_path) for every project include and BUILD label."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if not d.startswith(('.', 'bazel-'))]
        if rel_dir.split('/')[0] in UNCHECKED:
            dirnames[:] = []
            continue
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if name.endswith(SOURCE_EXT):
                pattern, kind = INCLUDE, 'include'
            elif name == 'BUILD':
                pattern, kind = LABEL, 'label'
            else:
                continue
            with open(os.path.join(dirpath, name), encoding='utf-8', errors='replace') as f:
                text = f.read()
            for m in pattern.finditer(text):
                line = text.count('\n', 0, m.start()) + 1
                if kind == 'include':
                    target = m.group(1) or m.group(2)
                    if '/' not in target:
                        continue
                else:
                    package = m.group(1)
                    if not package:
                        continue  # //:defs.bzl and other root labels
                    target = package + '/BUILD'
                yield rel, line, target


def violations(root):
    found = []
    for source, line, target in arrows(root):
        src, dst = folder_of(source), folder_of(target)
        if src is None or dst is None or src == dst:
            continue
        if LAYERS[dst] >= LAYERS[src]:
            found.append(f'{source}:{line}: {src}/ (layer {LAYERS[src]}) uses {target}, '
                         f'in {dst}/ (layer {LAYERS[dst]}): a folder may only use lower layers')
    return found


def self_test():
    """A tree with one upward include and one upward label must fail; a clean one must pass."""
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), 'w') as f:
                f.write(text)
        write('core/tensor.h', '#include "absl/status/status.h"\n')
        write('ops/kernel.h', '#include "core/tensor.h"\n#include "graph/ir.h"\n')
        clean = violations(root)
        write('graph/ir.h', '#include "ops/kernel.h"\n')
        write('comm/BUILD', 'cc_library(name = "c", deps = ["//runtime:trainer"])\n')
        dirty = violations(root)
    ok = not clean and len(dirty) == 2 and 'graph/ir.h:1' in dirty[0] + dirty[1]
    print('check_layers self-test:', 'ok' if ok else f'FAILED (clean={clean}, dirty={dirty})')
    return ok


def main():
    if '--self-test' in sys.argv[1:]:
        return 0 if self_test() else 1
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = violations(root)
    for v in found:
        print(v)
    print(f'check_layers: {len(found)} arrow(s) pointing up')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
