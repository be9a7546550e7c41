/**
 * No import circle between the modules of src/: a leaf such as format.ts serves the others,
 * and no two modules lean on each other. Type-only imports count too.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { EXTENSION_DIR } from './fixtures';

const SOURCES = join(EXTENSION_DIR, 'src');

/** Module name -> the src/ modules it imports (``from './x'``, in import and export lines). */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of readdirSync(SOURCES).filter(name => name.endsWith('.ts'))) {
    const text = readFileSync(join(SOURCES, file), 'utf-8');
    const targets = [...text.matchAll(/\bfrom\s+'\.\/([\w-]+)'/g)].map(match => match[1]);
    graph.set(file.replace(/\.ts$/, ''), [...new Set(targets)]);
  }
  return graph;
}

/** The first circle found, as a path that starts and ends at the same module, or null. */
function findCircle(graph: Map<string, string[]>): string[] | null {
  const done = new Set<string>();
  const visit = (module: string, path: string[]): string[] | null => {
    const seen = path.indexOf(module);
    if (seen >= 0) {
      return [...path.slice(seen), module];
    }
    if (done.has(module)) {
      return null;
    }
    for (const next of graph.get(module) ?? []) {
      const circle = visit(next, [...path, module]);
      if (circle !== null) {
        return circle;
      }
    }
    done.add(module);
    return null;
  };
  for (const module of graph.keys()) {
    const circle = visit(module, []);
    if (circle !== null) {
      return circle;
    }
  }
  return null;
}

test('the check finds a circle where there is one', () => {
  const circle = new Map([
    ['a', ['b']],
    ['b', ['c']],
    ['c', ['a']]
  ]);
  assert.deepEqual(findCircle(circle), ['a', 'b', 'c', 'a']);
  assert.equal(findCircle(new Map([['a', ['b']]])), null);
});

test('no import circle between the modules of src/', () => {
  const graph = importGraph();
  assert.ok(graph.get('summary')?.includes('format'), 'the graph reads the imports');
  const circle = findCircle(graph);
  assert.equal(circle, null, `import circle: ${circle?.join(' -> ')}`);
});
