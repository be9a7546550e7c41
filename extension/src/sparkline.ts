/**
 * The geometry and words of the small GPU memory charts (sparklines). Pure: no DOM.
 *
 * The same chart as the notebook widget's (fracnb_meter/sparkline.py): time runs from the
 * history's start (left) to its latest reading (right); memory from 0 (bottom) to the higher
 * of the budget and the peak, drawn at TOP_SHARE of the height so the budget line stays in
 * view. The series' points are joined by a line that ends at the latest reading.
 */
import { formatBytes } from './format';
import type { IMemorySeries } from './usage';

export const CHART_WIDTH = 240;
export const CHART_HEIGHT = 40;
/** The higher of budget and peak is drawn at 90 % of the height. */
export const TOP_SHARE = 0.9;

export interface IXY {
  x: number;
  y: number;
}

/** Where things go in a width x height box, y downwards as in SVG. */
export interface ISparkGeometry {
  width: number;
  height: number;
  /** Empty before any reading. */
  line: IXY[];
  budgetY: number | null;
  peak: IXY | null;
}

function round(value: number): number {
  return Math.round(value * 10) / 10;
}

/** The chart of one series up to nowS seconds after the history began. */
export function sparkGeometry(
  series: IMemorySeries,
  nowS: number,
  budgetBytes: number | null,
  width = CHART_WIDTH,
  height = CHART_HEIGHT
): ISparkGeometry {
  const points = series.points.map(point => ({ atS: point.at_s, bytes: point.bytes }));
  const { latest, peak } = series;
  if (latest !== null && (points.length === 0 || latest.at_s > points[points.length - 1].atS)) {
    points.push({ atS: latest.at_s, bytes: latest.bytes });
  }
  const budget = budgetBytes !== null && budgetBytes > 0 ? budgetBytes : null;
  const top = Math.max(budget ?? 0, peak?.bytes ?? 0, 1) / TOP_SHARE;
  const x = (atS: number): number => (nowS > 0 ? round((width * atS) / nowS) : width);
  const y = (bytes: number): number => round(height * (1 - bytes / top));
  return {
    width,
    height,
    line: points.map(point => ({ x: x(point.atS), y: y(point.bytes) })),
    budgetY: budget === null ? null : y(budget),
    peak: peak === null ? null : { x: x(peak.at_s), y: y(peak.bytes) }
  };
}

/** 12 -> "12 s", 300 -> "5 min", 7200 -> "2 h", 259200 -> "3 days" (as the widget writes). */
export function durationWords(seconds: number): string {
  const units: Array<[string, number, number]> = [
    ['days', 86400, 2 * 86400],
    ['h', 3600, 3600],
    ['min', 60, 60]
  ];
  for (const [unit, size, from] of units) {
    if (seconds >= from) {
      return `${Math.round(seconds / size)} ${unit}`;
    }
  }
  return `${Math.round(seconds)} s`;
}

/** Said of a kernel's chart that goes on from the notebook's previous kernel (carried_from). */
export const CARRIED_NOTE = "It goes on from this notebook's previous kernel.";

/** The chart in words, for its title: now, the peak and when, the budget. */
export function sparkTitle(
  name: string,
  series: IMemorySeries,
  nowS: number,
  budgetBytes: number | null
): string {
  const head = `GPU memory of ${name} over the last ${durationWords(nowS)}`;
  const { latest, peak } = series;
  if (latest === null || peak === null) {
    return `${head}: no reading yet.`;
  }
  const ago = nowS - peak.at_s;
  const when = ago < 1 ? 'now' : `${durationWords(ago)} ago`;
  const budget =
    budgetBytes !== null && budgetBytes > 0 ? `budget ${formatBytes(budgetBytes)}` : 'no budget';
  return `${head}: now ${formatBytes(latest.bytes)}; peak ${formatBytes(peak.bytes)}, ${when}; ${budget}.`;
}
