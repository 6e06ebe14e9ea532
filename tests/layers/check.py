#!/usr/bin/env python3
"""tests/layers/check.py: every arrow one way.

Takes the source tree, a build folder and the layer table (tests/layers/layers.txt);
prints "ok layers/CHECK" or one "FAIL layers/CHECK: why" line per violation, and exits 1
when there was any. The graph it judges is the files' own:

  - includes: every `#include "..."` of every file, resolved as the compiler resolves
    it (the file's folder, then the -I folders of BUILD/cflags.txt, then the table's
    `search` folders), cross-checked against `cc -MM` of every compiled file;
  - calls: which object file defines each symbol another object leaves undefined
    (`nm`), so a call, a use of a variable or a table, is an arrow from the file that
    uses it to the file that defines it. Calls through function pointers (a backend's
    CclBackend) are no arrows: that is what an interface is for.

The checks: every file lies in exactly one layer; no file includes or calls a file of
a layer above its own; no files include or call each other in a loop, inside a layer
or across layers; no file is longer than the table's limit; every exception the table
grants is still an arrow, and still needs granting. Generated files are named by their
place in the build folder, as `build/NAME` whatever the folder is called.

  tests/layers/check.py --root ROOT --build BUILD --table TABLE [--cc CC]
"""
import argparse
import fnmatch
import os
import re
import shlex
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCE_EXT = ('.c', '.h')


class Table:
    """The layer table: layers top to bottom, their patterns, exceptions, the limit."""

    def __init__(self, path):
        self.layers = []          # [(name, [patterns])], top first
        self.excepts = {}         # (from, to) -> reason
        self.scan = []            # folders whose every .c and .h must be placed
        self.search = []          # (prefix, folder): extra include folders
        self.limit = None
        self.errors = []
        cur = None
        with open(path) as f:
            for n, raw in enumerate(f, 1):
                line = raw.split('#', 1)[0].rstrip()
                if not line.strip():
                    continue
                words = line.split()
                if raw[0] in ' \t':          # continues a layer's patterns
                    if cur is None:
                        self.errors.append('%s:%d: patterns before any layer' % (path, n))
                    else:
                        cur[1].extend(words)
                    continue
                kw = words[0]
                if kw == 'layer' and len(words) >= 2:
                    cur = (words[1], words[2:])
                    self.layers.append(cur)
                elif kw == 'except':
                    m = re.match(r'except\s+(\S+)\s*->\s*(\S+)\s*:\s*(.+)$', line)
                    if not m:
                        self.errors.append('%s:%d: expected "except FROM -> TO: why"' % (path, n))
                    else:
                        self.excepts[(m.group(1), m.group(2))] = m.group(3)
                    cur = None
                elif kw == 'scan':
                    self.scan.extend(words[1:])
                    cur = None
                elif kw == 'search' and len(words) == 3:
                    self.search.append((words[1], words[2]))
                    cur = None
                elif kw == 'limit' and len(words) == 2 and words[1].isdigit():
                    self.limit = int(words[1])
                    cur = None
                else:
                    self.errors.append('%s:%d: unknown line: %s' % (path, n, line.strip()))

    @staticmethod
    def matches(pattern, name):
        """Shell patterns whose * stays inside one folder."""
        p, q = pattern.split('/'), name.split('/')
        return len(p) == len(q) and all(fnmatch.fnmatchcase(b, a) for a, b in zip(p, q))

    def layer_of(self, name):
        hits = [i for i, (_, pats) in enumerate(self.layers) if any(self.matches(p, name) for p in pats)]
        return hits


class Tree:
    """The files, their layers and the arrows between them."""

    def __init__(self, root, build, table, cc):
        self.root, self.build, self.table, self.cc = root, build, table, cc
        self.fails = []
        self.nodes = {}           # name -> path on disk
        self.includes = {}        # name -> {name}
        self.calls = {}           # name -> {name: {symbols}}
        self.objects = {}         # name -> object path
        flags = ''
        try:
            with open(os.path.join(build, 'cflags.txt')) as f:
                flags = f.read().split(' (')[0]
        except OSError:
            self.fails.append(('setup', '%s/cflags.txt is missing: build first' % build))
        words = shlex.split(flags)
        self.cflags = [w for w in words[1:] if w.startswith(('-I', '-D', '-std'))]
        self.idirs = [w[2:] for w in words if w.startswith('-I')]

    # ---- names: "dir/file.c" in the tree, "build/file.c" in the build folder ----

    def name_of(self, path):
        path = os.path.normpath(path)
        for base, prefix in ((self.build, 'build/'), (self.root, '')):
            rel = os.path.relpath(path, base)
            if not rel.startswith('..'):
                return prefix + rel
        return None

    def path_of(self, name):
        if name.startswith('build/'):
            return os.path.join(self.build, name[6:])
        return os.path.join(self.root, name)

    def collect(self):
        for top in self.table.scan:
            for d, _, files in os.walk(os.path.join(self.root, top)):
                for f in files:
                    if f.endswith(SOURCE_EXT):
                        p = os.path.join(d, f)
                        self.nodes[self.name_of(p)] = p
        # Generated sources and headers named in the table.
        for _, pats in self.table.layers:
            for pat in pats:
                if pat.startswith('build/') and os.path.exists(self.path_of(pat)):
                    self.nodes[pat] = self.path_of(pat)
        # Objects: BUILD/X.o is the object of X.c (tree) or of BUILD/X.c (generated).
        for d, _, files in os.walk(self.build):
            for f in files:
                if not f.endswith('.o'):
                    continue
                o = os.path.join(d, f)
                rel = os.path.relpath(o, self.build)[:-2] + '.c'
                for name in (rel, 'build/' + rel):
                    if name in self.nodes:
                        self.objects[name] = o
                        break

    # ---- includes ----

    def resolve(self, name, inc):
        folders = [os.path.dirname(self.nodes[name])]
        folders += [os.path.join(self.root, d) if not os.path.isabs(d) else d for d in self.idirs]
        folders += [os.path.join(self.root, d) for p, d in self.table.search if name.startswith(p)]
        for d in folders:
            p = os.path.join(d, inc)
            if os.path.isfile(p):
                return self.name_of(p)
        return None

    def read_includes(self):
        for name, path in self.nodes.items():
            with open(path, errors='replace') as f:
                text = f.read()
            deps = set()
            for inc in INCLUDE.findall(text):
                target = self.resolve(name, inc)
                if target in self.nodes and target != name:
                    deps.add(target)
            self.includes[name] = deps

    def closure(self, name):
        seen, todo = set(), [name]
        while todo:
            for d in self.includes.get(todo.pop(), ()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    def cross_check_includes(self):
        """cc -MM of every compiled file must name no header the graph above misses."""
        missing = []
        for name in sorted(self.objects):
            extra = ['-I' + os.path.join(self.root, d) for p, d in self.table.search if name.startswith(p)]
            cmd = [self.cc, '-MM'] + self.cflags + extra + [self.nodes[name]]
            r = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True)
            if r.returncode != 0:
                missing.append('%s: %s failed: %s' % (name, ' '.join(cmd[:2]), r.stderr.strip()[:300]))
                continue
            deps = r.stdout.replace('\\\n', ' ').split(':', 1)[-1].split()
            have = self.closure(name)
            for d in deps[1:]:
                dn = self.name_of(os.path.join(self.root, d))
                if dn in self.nodes and dn != name and dn not in have:
                    missing.append('%s includes %s (cc -MM), which the checker cannot trace' % (name, dn))
        return missing

    # ---- calls ----

    def read_calls(self):
        defs, undefs = {}, {}
        for name, o in self.objects.items():
            r = subprocess.run(['nm', '-P', o], capture_output=True, text=True)
            if r.returncode != 0:
                self.fails.append(('calls', 'nm %s failed: %s' % (o, r.stderr.strip())))
                continue
            und = set()
            for line in r.stdout.splitlines():
                w = line.split()
                if len(w) < 2:
                    continue
                if w[1] == 'U':
                    und.add(w[0])
                elif w[1].isupper():
                    defs.setdefault(w[0], set()).add(name)
            undefs[name] = und
        for name, und in undefs.items():
            out = self.calls.setdefault(name, {})
            for sym in und:
                for d in defs.get(sym, ()):
                    if d != name:
                        out.setdefault(d, set()).add(sym)


def loops(edges):
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    ap = argparse.ArgumentParser(description='Checks that includes and calls only go down the layer table.')
    ap.add_argument('--root', default='.')
    ap.add_argument('--build', required=True)
    ap.add_argument('--table', required=True)
    ap.add_argument('--cc', default=os.environ.get('CC', 'cc'))
    a = ap.parse_args()
    table = Table(a.table)
    tree = Tree(os.path.abspath(a.root), os.path.abspath(a.build), table, a.cc)
    fails = list(tree.fails) + [('table', e) for e in table.errors]
    tree.collect()
    tree.read_includes()
    tree.read_calls()
    if not tree.objects:
        fails.append(('calls', 'no object files of the tree in %s: build first' % a.build))

    # Every file in exactly one layer; every pattern of the tree names a file.
    layer = {}
    for name in sorted(tree.nodes):
        hits = table.layer_of(name)
        if not hits:
            fails.append(('placed', '%s is in no layer of %s' % (name, a.table)))
        elif len(hits) > 1:
            fails.append(('placed', '%s is in layers %s' % (name, ', '.join(table.layers[i][0] for i in hits))))
        else:
            layer[name] = hits[0]
    for lname, pats in table.layers:
        for p in pats:
            if not p.startswith('build/') and not any(table.matches(p, n) for n in tree.nodes):
                fails.append(('placed', 'layer %s: %s names no file' % (lname, p)))

    def above(x, y):
        return x in layer and y in layer and layer[y] < layer[x]

    # The arrows, less the exceptions the table grants (each must still be an arrow).
    # arrows[x][y]: what x does to y, as words ("includes it", "calls f, g there").
    arrows = {}
    for x, deps in tree.includes.items():
        for y in deps:
            arrows.setdefault(x, {})[y] = 'includes it'
    for x, deps in tree.calls.items():
        for y, syms in deps.items():
            what = 'calls ' + ', '.join(sorted(syms)[:6]) + (' ...' if len(syms) > 6 else '') + ' there'
            prev = arrows.setdefault(x, {}).get(y)
            arrows[x][y] = prev + ' and ' + what if prev else what
    granted = {}
    for (x, y), why in sorted(table.excepts.items()):
        if y not in arrows.get(x, {}):
            fails.append(('exceptions', 'the table excepts %s -> %s, which is no arrow any more: remove it' % (x, y)))
        else:
            granted[(x, y)] = arrows[x].pop(y)

    for x in sorted(arrows):
        for y in sorted(arrows[x]):
            if above(x, y):
                kind = 'include' if arrows[x][y] == 'includes it' else 'call'
                fails.append(('upward-' + kind, '%s (layer %s) -> %s (layer %s, above it): %s'
                              % (x, table.layers[layer[x]][0], y, table.layers[layer[y]][0], arrows[x][y])))
    for comp in loops({x: set(d) for x, d in arrows.items()}):
        inside = set(comp)
        parts = ['%s -> %s: %s' % (x, y, arrows[x][y]) for x in comp for y in sorted(arrows.get(x, ())) if y in inside]
        fails.append(('loops', 'a loop between %d files: %s' % (len(comp), '; '.join(parts))))
    # An exception must still be needed: an arrow that goes up, or closes a loop.
    for (x, y) in sorted(granted):
        rest = {a: set(d) for a, d in arrows.items()}
        for (a, b) in granted:
            if (a, b) != (x, y):
                rest.setdefault(a, set()).add(b)
        if not above(x, y) and not _reach(rest, y, x):
            fails.append(('exceptions', 'the table excepts %s -> %s, which goes down and closes no loop now: '
                          'remove the exception' % (x, y)))

    if table.limit:
        for name in sorted(tree.nodes):
            if name.startswith('build/'):
                continue
            with open(tree.nodes[name], errors='replace') as f:
                n = sum(1 for _ in f)
            if n > table.limit:
                fails.append(('sizes', '%s has %d lines, more than %d' % (name, n, table.limit)))

    for m in tree.cross_check_includes():
        fails.append(('includes-traced', m))

    checks = ['setup', 'table', 'placed', 'upward-include', 'upward-call', 'loops', 'exceptions', 'sizes',
              'includes-traced', 'calls']
    for c in checks:
        mine = [m for k, m in fails if k == c]
        if not mine:
            print('ok layers/%s' % c)
        for m in mine:
            print('FAIL layers/%s: %s' % (c, m))
    return 1 if fails else 0


def _reach(edges, start, target):
    """Whether target can be reached from start along edges (an arrow to start would close a loop)."""
    seen, todo = {start}, [start]
    while todo:
        for w in edges.get(todo.pop(), ()):
            if w == target:
                return True
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return False


if __name__ == '__main__':
    sys.exit(main())
