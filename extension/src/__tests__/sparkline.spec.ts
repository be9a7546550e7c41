import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { durationWords, sparkGeometry, sparkTitle } from '../sparkline';
import type { IMemoryPoint, IMemorySeries } from '../usage';
import { GIB } from './fixtures';

function point(atS: number, gib: number): IMemoryPoint {
  return { at_s: atS, bytes: Math.round(gib * GIB) };
}

const SERIES: IMemorySeries = {
  step_s: 1,
  points: [point(0, 2), point(50, 9), point(100, 4)],
  peak: point(50, 9),
  latest: point(100, 4)
};

const EMPTY: IMemorySeries = { step_s: 1, points: [], peak: null, latest: null };

describe('sparkline geometry', () => {
  test('against the budget, which tops the scale at 90 % of the height', () => {
    // 18 GiB / 0.9 = 20 GiB is the height of the box.
    assert.deepEqual(sparkGeometry(SERIES, 200, 18 * GIB, 200, 40), {
      width: 200,
      height: 40,
      line: [
        { x: 0, y: 36 },
        { x: 50, y: 22 },
        { x: 100, y: 32 }
      ],
      budgetY: 4,
      peak: { x: 50, y: 22 }
    });
  });

  test('a peak over the budget sets the scale; the latest reading ends the line', () => {
    const shape = sparkGeometry({ ...SERIES, latest: point(150, 1) }, 150, 4.5 * GIB, 150, 40);
    assert.deepEqual(shape.peak, { x: 50, y: 4 });
    assert.equal(shape.budgetY, 22);
    assert.deepEqual(shape.line[shape.line.length - 1], { x: 150, y: 36 });
    assert.equal(shape.line.length, 4);
  });

  test('the latest reading is not drawn twice when it is the last point', () => {
    assert.equal(sparkGeometry(SERIES, 100, null).line.length, 3);
  });

  test('before any reading, and at time zero', () => {
    assert.deepEqual(sparkGeometry(EMPTY, 0, null, 100, 20), {
      width: 100,
      height: 20,
      line: [],
      budgetY: null,
      peak: null
    });
    const one = { step_s: 1, points: [point(0, 1)], peak: point(0, 1), latest: point(0, 1) };
    assert.deepEqual(sparkGeometry(one, 0, null, 100, 20).line, [{ x: 100, y: 2 }]);
  });

  test('no budget line without a budget (0 is a CPU-only server)', () => {
    assert.equal(sparkGeometry(SERIES, 200, 0).budgetY, null);
    assert.equal(sparkGeometry(SERIES, 200, null).budgetY, null);
  });
});

describe('sparkline words', () => {
  test('now, the peak and when, the budget', () => {
    assert.equal(
      sparkTitle('this server', SERIES, 400, 18 * GIB),
      'GPU memory of this server over the last 7 min: now 4 GiB; peak 9 GiB, 6 min ago; ' +
        'budget 18 GiB.'
    );
    assert.match(
      sparkTitle('train.ipynb', { ...SERIES, peak: point(100, 9) }, 100.5, null),
      /peak 9 GiB, now; no budget\.$/
    );
    assert.equal(
      sparkTitle('x', EMPTY, 3, null),
      'GPU memory of x over the last 3 s: no reading yet.'
    );
  });

  test('durations', () => {
    assert.deepEqual([12, 300, 7200, 86400, 3 * 86400].map(durationWords), [
      '12 s',
      '5 min',
      '2 h',
      '24 h',
      '3 days'
    ]);
  });
});
