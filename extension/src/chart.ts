/**
 * The panel's GPU memory charts as SVG elements, from the pure geometry in sparkline.ts.
 */
import { sparkGeometry, sparkTitle } from './sparkline';
import type { IMemorySeries } from './usage';

const SVG = 'http://www.w3.org/2000/svg';

function svgElement(tag: string, attributes: Record<string, string | number>): SVGElement {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, String(value));
  }
  return node;
}

/**
 * A sparkline of one series: the memory line, the budget (dashed) and the peak (a dot),
 * with the same in words as its title and accessible name.
 */
export function sparklineElement(
  name: string,
  series: IMemorySeries,
  nowS: number,
  budgetBytes: number | null,
  note: string | null = null
): SVGElement {
  const shape = sparkGeometry(series, nowS, budgetBytes);
  const words = [sparkTitle(name, series, nowS, budgetBytes), note].filter(Boolean).join(' ');
  const chart = svgElement('svg', {
    class: 'fracnb-sparkline',
    role: 'img',
    'aria-label': words,
    width: shape.width,
    height: shape.height,
    viewBox: `0 0 ${shape.width} ${shape.height}`
  });
  const title = svgElement('title', {});
  title.textContent = words;
  chart.append(title);
  if (shape.budgetY !== null) {
    chart.append(
      svgElement('line', {
        class: 'fracnb-sparkline-budget',
        x1: 0,
        x2: shape.width,
        y1: shape.budgetY,
        y2: shape.budgetY
      })
    );
  }
  if (shape.line.length > 0) {
    const points = shape.line.map(({ x, y }) => `${x},${y}`).join(' ');
    chart.append(svgElement('polyline', { class: 'fracnb-sparkline-line', points }));
  }
  if (shape.peak !== null) {
    chart.append(
      svgElement('circle', {
        class: 'fracnb-sparkline-peak',
        cx: shape.peak.x,
        cy: shape.peak.y,
        r: 2.5
      })
    );
  }
  return chart;
}
