import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { AlertLevel, alertLevel, budgetAlerts } from '../alerts';
import { GIB, kernel, usage } from './fixtures';

const at = (kernelBytes: number, serverBytes: number) =>
  usage({
    kernels: [kernel({ gpu_memory_bytes: kernelBytes })],
    server: { gpu_memory_bytes: serverBytes }
  });

const NONE: ReadonlyMap<string, AlertLevel> = new Map();

describe('alert levels', () => {
  test('critical from 95 %, over above 100 %', () => {
    assert.equal(alertLevel(0.94, undefined), null);
    assert.equal(alertLevel(0.95, undefined), 'critical');
    assert.equal(alertLevel(1, undefined), 'critical');
    assert.equal(alertLevel(1.2, undefined), 'over');
  });

  test('an alert holds down to 90 %, then clears', () => {
    assert.equal(alertLevel(0.92, 'critical'), 'critical');
    assert.equal(alertLevel(0.92, 'over'), 'critical');
    assert.equal(alertLevel(0.89, 'critical'), null);
  });
});

describe('budget alerts', () => {
  test('a kernel at 98 % is alerted, without the server', () => {
    const { alerts } = budgetAlerts(at(19.5 * GIB, 19.6 * GIB), NONE);
    assert.deepEqual(
      alerts.map(alert => [alert.user.key, alert.level]),
      [['kernel:0123456789abcdef', 'critical']]
    );
    assert.match(
      alerts[0].message,
      /^train\.ipynb uses 19\.5 GiB, 98\u00a0% of your 20 GiB budget\./
    );
  });

  test('over budget on a shared GPU names the neighbours', () => {
    const { alerts } = budgetAlerts(at(24 * GIB, 24 * GIB), NONE);
    assert.equal(alerts[0].level, 'over');
    assert.match(alerts[0].message, /^Over budget: train\.ipynb uses 24 GiB, 120\u00a0%/);
    assert.match(alerts[0].message, /shared GPU.*neighbours' memory/);
  });

  test('over budget under hard isolation does not blame neighbours', () => {
    const document = at(24 * GIB, 24 * GIB);
    document.budget.isolation = 'hard';
    const { alerts } = budgetAlerts(document, NONE);
    assert.doesNotMatch(alerts[0].message, /neighbours/);
  });

  test('the alert goes when memory drops', () => {
    const first = budgetAlerts(at(0, 24 * GIB), NONE);
    assert.deepEqual(
      first.alerts.map(alert => alert.level),
      ['over']
    );
    const hovering = budgetAlerts(at(0, 18.5 * GIB), first.levels);
    assert.deepEqual(
      hovering.alerts.map(alert => alert.level),
      ['critical']
    );
    const below = budgetAlerts(at(0, 10 * GIB), hovering.levels);
    assert.deepEqual(below.alerts, []);
    assert.equal(below.levels.size, 0);
  });

  test('nothing without a budget', () => {
    const document = at(19.5 * GIB, 19.5 * GIB);
    document.budget.memory_bytes = null;
    assert.deepEqual(budgetAlerts(document, NONE).alerts, []);
  });

  test('every message fits a toast', () => {
    const long = usage({
      kernels: [
        kernel({
          path: 'experiments/2026/a-rather-long-notebook-name.ipynb',
          gpu_memory_bytes: 999 * GIB
        })
      ],
      server: { gpu_memory_bytes: 999 * GIB }
    });
    const alerts = budgetAlerts(long, NONE).alerts;
    assert.equal(alerts.length, 1);
    for (const alert of alerts) {
      assert.ok(alert.message.length <= 140, `${alert.message.length}: ${alert.message}`);
      assert.match(alert.message, /a-rather-long/);
    }
  });
});
