/**
 * A hand-written SVG line plot: ms per head call against rows per call (log2 x, log10 y), one
 * line per type, and each type's bandwidth floor (head bytes / measured read bandwidth: the
 * least time a call can take if it reads the weights once) as a dashed line in its colour, and
 * a peer's times, if any, as a dotted line with open circles in the same colour.
 */

export interface PlotSeries {
  label: string;
  points: { n: number; ms: number }[];
  /** ms: the bandwidth floor of this series. */
  floorMs: number | null;
  /** The peer's ms per call for the same type, if a peer ran. */
  peerPoints?: { n: number; ms: number }[];
}

const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#637939", "#843c39", "#7b4173"];

function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function tickLabel(v: number): string {
  if (v >= 100) return v.toFixed(0);
  if (v >= 1) return Number(v.toPrecision(2)).toString();
  return Number(v.toPrecision(1)).toString();
}

/** peerLabel names the dotted lines in the legend when any series has peerPoints. */
export function plotSvg(title: string, subtitle: string, series: readonly PlotSeries[], peerLabel = "peer"): string {
  const W = 900;
  const H = 560;
  const m = { left: 70, right: 190, top: 62, bottom: 56 };
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const ns = [...new Set(series.flatMap((s) => s.points.map((p) => p.n)))].sort((a, b) => a - b);
  const peers = series.some((s) => (s.peerPoints?.length ?? 0) > 0);
  const values = series
    .flatMap((s) => [...s.points, ...(s.peerPoints ?? [])].map((p) => p.ms).concat(s.floorMs !== null ? [s.floorMs] : []))
    .filter((v) => v > 0 && Number.isFinite(v));
  if (values.length === 0) values.push(1);
  const lo = Math.log10(Math.min(...values) * 0.8);
  const hi = Math.log10(Math.max(...values) * 1.25);
  const xMin = Math.log2(ns[0] ?? 1);
  const xMax = Math.max(xMin + 1, Math.log2(ns[ns.length - 1] ?? 2));
  const x = (n: number) => m.left + ((Math.log2(n) - xMin) / (xMax - xMin)) * pw;
  const y = (ms: number) => m.top + ph - ((Math.log10(ms) - lo) / (hi - lo)) * ph;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${m.left}" y="24" font-size="16" font-weight="bold">${esc(title)}</text>`);
  out.push(`<text x="${m.left}" y="44" fill="#555">${esc(subtitle)}</text>`);
  // Grid and y ticks: 1, 2, 5 per decade.
  for (let d = Math.floor(lo); d <= Math.ceil(hi); d++) {
    for (const k of [1, 2, 5]) {
      const v = k * 10 ** d;
      if (Math.log10(v) < lo || Math.log10(v) > hi) continue;
      const yy = y(v).toFixed(1);
      out.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${yy}" y2="${yy}" stroke="${k === 1 ? "#ccc" : "#eee"}"/>`);
      out.push(`<text x="${m.left - 6}" y="${yy}" text-anchor="end" dominant-baseline="middle">${tickLabel(v)}</text>`);
    }
  }
  for (const n of ns) {
    const xx = x(n).toFixed(1);
    out.push(`<line x1="${xx}" x2="${xx}" y1="${m.top}" y2="${m.top + ph}" stroke="#eee"/>`);
    out.push(`<text x="${xx}" y="${m.top + ph + 18}" text-anchor="middle">${n}</text>`);
  }
  out.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${m.left + pw / 2}" y="${H - 14}" text-anchor="middle">rows per head call (N)</text>`);
  out.push(`<text transform="translate(18 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle">ms per call (log scale)</text>`);
  series.forEach((s, i) => {
    const color = palette[i % palette.length]!;
    if (s.floorMs !== null && s.floorMs > 0) {
      const yy = y(s.floorMs).toFixed(1);
      out.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${yy}" y2="${yy}" stroke="${color}" stroke-dasharray="6 4" stroke-width="1.2"><title>${esc(s.label)} bandwidth floor ${s.floorMs.toFixed(2)} ms</title></line>`);
    }
    const pts = s.points.filter((p) => p.ms > 0).map((p) => `${x(p.n).toFixed(1)},${y(p.ms).toFixed(1)}`);
    if (pts.length > 0) out.push(`<polyline points="${pts.join(" ")}" fill="none" stroke="${color}" stroke-width="2"/>`);
    for (const p of s.points) {
      if (p.ms > 0) out.push(`<circle cx="${x(p.n).toFixed(1)}" cy="${y(p.ms).toFixed(1)}" r="3.5" fill="${color}"><title>${esc(s.label)} N=${p.n}: ${p.ms.toFixed(2)} ms</title></circle>`);
    }
    const peer = (s.peerPoints ?? []).filter((p) => p.ms > 0);
    if (peer.length > 0) out.push(`<polyline points="${peer.map((p) => `${x(p.n).toFixed(1)},${y(p.ms).toFixed(1)}`).join(" ")}" fill="none" stroke="${color}" stroke-width="1.5" stroke-dasharray="2 3"/>`);
    for (const p of peer) {
      out.push(`<circle cx="${x(p.n).toFixed(1)}" cy="${y(p.ms).toFixed(1)}" r="3.5" fill="white" stroke="${color}" stroke-width="1.5"><title>${esc(s.label)} ${esc(peerLabel)} N=${p.n}: ${p.ms.toFixed(2)} ms</title></circle>`);
    }
    const ly = m.top + 10 + i * 20;
    const lx = m.left + pw + 16;
    out.push(`<line x1="${lx}" x2="${lx + 22}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"/>`);
    out.push(`<text x="${lx + 28}" y="${ly}" dominant-baseline="middle">${esc(s.label)}</text>`);
  });
  const ly = m.top + 10 + series.length * 20 + 6;
  const lx = m.left + pw + 16;
  out.push(`<line x1="${lx}" x2="${lx + 22}" y1="${ly}" y2="${ly}" stroke="#333" stroke-dasharray="6 4"/>`);
  out.push(`<text x="${lx + 28}" y="${ly}" dominant-baseline="middle">bandwidth floor</text>`);
  if (peers) {
    out.push(`<line x1="${lx}" x2="${lx + 22}" y1="${ly + 20}" y2="${ly + 20}" stroke="#333" stroke-width="1.5" stroke-dasharray="2 3"/>`);
    out.push(`<text x="${lx + 28}" y="${ly + 20}" dominant-baseline="middle">${esc(peerLabel)}</text>`);
  }
  out.push(`</svg>`);
  return out.join("\n") + "\n";
}
