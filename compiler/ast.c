/* ast.c — syntax-tree constructors, destructors and the --emit ast printer. */
#include <stdlib.h>

#include "ppc.h"

Expr *ast_expr(ExprKind k, Loc loc) {
  Expr *e = xcalloc(1, sizeof *e);
  e->kind = k;
  e->loc = loc;
  e->depth = 1;
  return e;
}

Arg *ast_arg(char *key, Loc key_loc, Expr *val) {
  Arg *a = xcalloc(1, sizeof *a);
  a->key = key;
  a->key_loc = key_loc;
  a->val = val;
  a->tail = a;
  return a;
}

Stmt *ast_stmt(StmtKind k, Loc loc) {
  Stmt *s = xcalloc(1, sizeof *s);
  s->kind = k;
  s->loc = loc;
  s->tail = s;
  return s;
}

Setting *ast_setting(char *key, Loc key_loc, Expr *val) {
  Setting *s = xcalloc(1, sizeof *s);
  s->key = key;
  s->key_loc = key_loc;
  s->val = val;
  s->tail = s;
  return s;
}

void ast_free_expr(Expr *e) {
  if (!e) return;
  free(e->name);
  ast_free_expr(e->lhs);
  ast_free_expr(e->rhs);
  ast_free_args(e->args);
  free(e);
}

void ast_free_args(Arg *a) {
  while (a) {
    Arg *next = a->next;
    free(a->key);
    ast_free_expr(a->val);
    free(a);
    a = next;
  }
}

void ast_free_settings(Setting *s) {
  while (s) {
    Setting *next = s->next;
    free(s->key);
    ast_free_expr(s->val);
    free(s);
    s = next;
  }
}

void ast_free_stmts(Stmt *s) {
  while (s) {
    Stmt *next = s->next;
    free(s->name);
    ast_free_expr(s->value);
    ast_free_expr(s->hi);
    ast_free_args(s->dims);
    free(s->dtype);
    free(s->ckpt);
    free(s->role);
    ast_free_settings(s->settings);
    ast_free_stmts(s->body);
    free(s);
    s = next;
  }
}

void ast_free(Ast *a) {
  if (!a) return;
  ast_free_stmts(a->stmts);
  free(a);
}

/* ============================================================================================
 * --emit ast: one statement a line, expressions fully parenthesised
 * ========================================================================================== */

static void print_expr(FILE *f, const Expr *e) {
  switch (e->kind) {
  case E_INT: fprintf(f, "%lld", (long long)e->ival); break;
  case E_FLOAT: fprintf(f, "%g", e->fval); break;
  case E_NAME:
  case E_WORD: fputs(e->name, f); break;
  case E_STR: fprintf(f, "\"%s\"", e->name); break;
  case E_NEG:
    fputs("(-", f);
    print_expr(f, e->lhs);
    fputc(')', f);
    break;
  case E_RANGE:
    print_expr(f, e->lhs);
    fputs("..", f);
    print_expr(f, e->rhs);
    break;
  case E_BIN:
    fputc('(', f);
    print_expr(f, e->lhs);
    fprintf(f, " %c ", e->op);
    print_expr(f, e->rhs);
    fputc(')', f);
    break;
  case E_CALL:
    fprintf(f, "%s(", e->name);
    for (const Arg *a = e->args; a; a = a->next) {
      if (a->key) fprintf(f, "%s=", a->key);
      print_expr(f, a->val);
      if (a->next) fputs(", ", f);
    }
    fputc(')', f);
    break;
  }
}

static void print_list(FILE *f, const Arg *a) {
  fputc('[', f);
  for (; a; a = a->next) {
    print_expr(f, a->val);
    if (a->next) fputs(", ", f);
  }
  fputc(']', f);
}

static void print_stmts(FILE *f, const Stmt *s, int depth) {
  for (; s; s = s->next) {
    fprintf(f, "%*s", depth * 2, "");
    switch (s->kind) {
    case S_MODEL: fprintf(f, "model \"%s\"\n", s->name); break;
    case S_DIM:
      fprintf(f, "dim %s = ", s->name);
      print_expr(f, s->value);
      fputc('\n', f);
      break;
    case S_INPUT:
      fprintf(f, "input %s: %s", s->name, s->dtype);
      print_list(f, s->dims);
      fputc('\n', f);
      break;
    case S_PARAM:
      fprintf(f, "param %s: ", s->name);
      print_list(f, s->dims);
      if (s->ckpt) fprintf(f, " as \"%s\"", s->ckpt);
      if (s->value) {
        fputs(" init ", f);
        print_expr(f, s->value);
      }
      if (s->role) fprintf(f, " tp %s", s->role);
      fputc('\n', f);
      break;
    case S_LET:
      fprintf(f, "%s = ", s->name);
      print_expr(f, s->value);
      fputc('\n', f);
      break;
    case S_FOR:
      fprintf(f, "for %s in ", s->name);
      print_expr(f, s->value);
      fputs("..", f);
      print_expr(f, s->hi);
      fputs(" {\n", f);
      print_stmts(f, s->body, depth + 1);
      fprintf(f, "%*s}\n", depth * 2, "");
      break;
    case S_MESH:
    case S_TRAIN:
    case S_CHECKPOINT:
      fputs(s->kind == S_MESH ? "mesh {" : s->kind == S_TRAIN ? "train {" : "checkpoint {", f);
      for (const Setting *t = s->settings; t; t = t->next) {
        fprintf(f, " %s = ", t->key);
        print_expr(f, t->val);
        if (t->next) fputc(',', f);
      }
      fputs(" }\n", f);
      break;
    }
  }
}

void ast_print(FILE *f, const Ast *a) { print_stmts(f, a->stmts, 0); }
