import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { TypingReporter } from '../use';

describe('typing is reported as use', () => {
  test('the first key at once, then at most once per interval', () => {
    let now = 0;
    const reports: number[] = [];
    const reporter = new TypingReporter(
      () => reports.push(now),
      10_000,
      () => now
    );
    reporter.keyPressed();
    now = 3_000;
    reporter.keyPressed();
    now = 9_999;
    reporter.keyPressed();
    now = 10_000;
    reporter.keyPressed();
    now = 60_000;
    reporter.keyPressed();
    assert.deepEqual(reports, [0, 10_000, 60_000]);
  });
});
