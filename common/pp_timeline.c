/* pp_timeline.c — the SVG picture of a pipeline timeline (pp_timeline.h), for ppc and ppr. */
#include "pp_timeline.h"

#include <math.h>

/* The picture's geometry, in SVG user units (pixels). */
enum { LEFT = 90, RIGHT = 20, TOP = 56, LANE = 30, GAP = 6, WIDTH = 1200 };

static const char *fill(char kind) {
  switch (kind) {
  case 'F': return "#4e79a7"; /* blue */
  case 'B': return "#59a14f"; /* green */
  case 'W': return "#f28e2b"; /* orange */
  case 'O': return "#9c755f"; /* brown */
  case 'f': return "#a0cbe8"; /* the same, lighter: a rank's odd chunks of layers */
  case 'b': return "#8cd17d";
  case 'w': return "#ffbe7d";
  default: return "#bab0ac";
  }
}

/* Text for SVG: the few characters XML reserves, escaped. */
static void text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

/* A round step for the axis: 1, 2 or 5 times a power of ten, about eight ticks over total. */
static double tick_step(double total) {
  double raw = total / 8, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

void pp_timeline_svg(FILE *f, const char *title, const char *subtitle, const PpLane *lane, int nlanes, double total,
                     const char *unit) {
  if (!(total > 0)) total = 1;
  double plot = WIDTH - LEFT - RIGHT, sx = plot / total;
  int height = TOP + nlanes * (LANE + GAP) + 40;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n",
          WIDTH, height, WIDTH, height);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", LEFT);
  text(f, title);
  fprintf(f, "</text>\n<text x=\"%d\" y=\"38\" fill=\"#555\">", LEFT);
  text(f, subtitle);
  fprintf(f, "</text>\n");
  for (int r = 0; r < nlanes; r++) {
    int y = TOP + r * (LANE + GAP);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">rank %d</text>\n", LEFT - 8, y + LANE / 2 + 4, r);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#f4f4f4\" stroke=\"#ccc\"/>\n", LEFT, y,
            plot, LANE);
    for (int i = 0; i < lane[r].n; i++) {
      const PpSpan *s = &lane[r].span[i];
      double x = LEFT + s->t0 * sx, w = (s->t1 - s->t0) * sx;
      if (w < 0.5) w = 0.5;
      fprintf(f,
              "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"white\" "
              "stroke-width=\"0.5\"><title>%c%d [%.4g, %.4g) %s</title></rect>\n",
              x, y, w, LANE, fill(s->kind), s->kind, s->mb, s->t0, s->t1, unit);
      if (s->mb >= 0 && w >= 14)
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"white\" font-size=\"%d\">%d</text>\n",
                x + w / 2, y + LANE / 2 + 4, w >= 22 ? 12 : 9, s->mb);
    }
  }
  int axis = TOP + nlanes * (LANE + GAP) + 4;
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, axis, LEFT + plot, axis);
  double step = tick_step(total);
  for (double t = 0; t <= total * (1 + 1e-9); t += step)
    fprintf(f,
            "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/><text x=\"%.2f\" y=\"%d\" "
            "text-anchor=\"middle\" fill=\"#333\">%g</text>\n",
            LEFT + t * sx, axis, LEFT + t * sx, axis + 4, LEFT + t * sx, axis + 17, t);
  fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"end\" fill=\"#333\">", LEFT + plot, axis + 32);
  text(f, unit);
  fprintf(f, "</text>\n");
  static const char legend[] = "FBWO";
  static const char *const name[] = {"forward", "backward (B)", "weights (W)", "optimizer"};
  for (int i = 0; i < 4; i++)
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
            LEFT + i * 130, axis + 22, fill(legend[i]), LEFT + i * 130 + 16, axis + 32, name[i]);
  fprintf(f, "</svg>\n");
}
