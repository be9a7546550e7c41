/**
 * The meter's levels and colours, held to test-data/meter-levels.json, which the in-kernel
 * widget's tests read too (tests/meter/test_widget.py): thresholds, a level per case, and the
 * colour of each level in style/base.css.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { CRITICAL_SHARE, Level, levelOf, WARNING_SHARE } from '../summary';
import { EXTENSION_DIR, testData } from './fixtures';

interface IColour {
  variable: string;
  fallback: string;
}

interface ILevels {
  thresholds: { warning: number; critical: number; over: number };
  colours: Record<'normal' | 'warning' | 'critical' | 'over', IColour>;
  cases: Array<{ used_bytes: number | null; limit_bytes: number | null; level: Level }>;
}

const LEVELS = testData<ILevels>('meter-levels.json');

/** The declarations of the rule whose selector is exactly ``selector`` in ``css``. */
function declarations(css: string, selector: string): Map<string, string> {
  const rules = [...css.matchAll(/([^{}]+)\{([^}]*)\}/g)];
  const rule = rules.find(([, head]) => head.replace(/\/\*[\s\S]*?\*\//g, '').trim() === selector);
  assert.ok(rule, `style/base.css has a rule for ${selector}`);
  return new Map(
    rule[2]
      .split(';')
      .map(part => part.split(':').map(side => side.trim()))
      .filter(([name, value]) => name && value)
      .map(([name, ...value]) => [name, value.join(':')])
  );
}

describe('meter levels (test-data/meter-levels.json)', () => {
  test('the thresholds', () => {
    assert.equal(WARNING_SHARE, LEVELS.thresholds.warning);
    assert.equal(CRITICAL_SHARE, LEVELS.thresholds.critical);
    assert.equal(levelOf(LEVELS.thresholds.over), 'critical');
  });

  for (const { used_bytes, limit_bytes, level } of LEVELS.cases) {
    test(`${used_bytes} of ${limit_bytes} bytes is ${level}`, () => {
      const share =
        used_bytes === null || limit_bytes === null || limit_bytes <= 0
          ? null
          : used_bytes / limit_bytes;
      assert.equal(levelOf(share), level);
    });
  }
});

describe('level colours in style/base.css', () => {
  const css = readFileSync(join(EXTENSION_DIR, 'style', 'base.css'), 'utf-8');
  const { normal, ...others } = LEVELS.colours;

  test("the meter's own colour for going over the budget", () => {
    const over = LEVELS.colours.over;
    assert.equal(declarations(css, ':root').get(over.variable), over.fallback);
  });

  test('the bar of a normal level', () => {
    assert.equal(
      declarations(css, '.fracnb-meter-bar-fill').get('background'),
      `var(${normal.variable})`
    );
  });

  for (const [level, { variable }] of Object.entries(others)) {
    test(`the bar and the status bar item at ${level}`, () => {
      const bar = declarations(css, `.fracnb-meter-bar-fill.fracnb-meter-${level}`);
      assert.equal(bar.get('background'), `var(${variable})`);
      const item = declarations(css, `.fracnb-meter-status.fracnb-meter-${level}`);
      assert.equal(item.get('background-color'), `var(${variable})`);
    });
  }
});
