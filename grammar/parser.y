/* parser.y — the .pdl grammar: a pure, reentrant LALR(1) parser that builds the syntax tree. */
%require "3.8"
%define api.pure full
%define api.location.type {Loc}
%define parse.error detailed
%define parse.lac full
%locations
%expect 0

%code requires {
#include "ppc.h"
typedef void *yyscan_t;
typedef struct ParseCtx {
  Src *src;
  Ast *ast;
  int off;            /* byte offset of the next character the scanner reads */
  int lex_reported;   /* the scanner already reported the current bad token */
} ParseCtx;
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                   \
  do {                                                                \
    if (N) { (Cur).first = YYRHSLOC(Rhs, 1).first;                    \
             (Cur).last = YYRHSLOC(Rhs, N).last; }                    \
    else   { (Cur).first = (Cur).last = YYRHSLOC(Rhs, 0).last; }      \
  } while (0)
}

%code provides {
int yylex(YYSTYPE *lval, Loc *lloc, yyscan_t scanner);
int yylex_init_extra(ParseCtx *ctx, yyscan_t *scanner);
int yylex_destroy(yyscan_t scanner);
struct yy_buffer_state *yy_scan_bytes(const char *bytes, int len, yyscan_t scanner);
}

%code {
#include <stdlib.h>
#include <string.h>
static void yyerror(Loc *loc, yyscan_t scanner, ParseCtx *ctx, const char *msg);
static Expr *bin(char op, Expr *l, Expr *r, Loc loc);
static int too_deep(ParseCtx *ctx, Expr *e, int depth);
/* an expression nested deeper than AST_MAX_DEPTH ends the parse, before anything recurses into it;
 * bison leaves a rule's own symbols to its action when it aborts, and $$ owns them all by then */
#define DEPTH(e, d) do { if (too_deep(ctx, (e), (d))) { ast_free_expr(e); YYABORT; } } while (0)
static Arg *arg_append(Arg *list, Arg *a);
static Stmt *stmt_append(Stmt *list, Stmt *s);
static Setting *setting_append(Setting *list, Setting *s);
static void clause_set(ParseCtx *ctx, Stmt *p, int which, Loc at, char *str, Expr *e);
}

%lex-param {yyscan_t scanner}
%parse-param {yyscan_t scanner} {ParseCtx *ctx}

%union {
  int64_t ival;
  double fval;
  char *str;
  Expr *expr;
  Arg *arg;
  Stmt *stmt;
  Setting *setting;
}

%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token <str> IDENT "identifier" WORD "word" STRING "string"
%token DIM "'dim'" INPUT "'input'" PARAM "'param'" FOR "'for'" IN "'in'" MESH "'mesh'"
       TRAIN "'train'" CHECKPOINT "'checkpoint'" MODEL "'model'" AS "'as'" INIT "'init'" TP "'tp'" DOTDOT "'..'"

%type <expr> expr call init_value setting_value
%type <arg> args arglist arg exprlist
%type <stmt> items item param_clauses
%type <setting> settings setting
%type <str> setting_key

%destructor { free($$); } <str>
%destructor { ast_free_expr($$); } <expr>
%destructor { ast_free_args($$); } <arg>
%destructor { ast_free_stmts($$); } <stmt>
%destructor { ast_free_settings($$); } <setting>

%left '+' '-'
%left '*' '/' '%'
%precedence NEG

%%

/* file: item* */
file
  : items                    { ctx->ast->stmts = $1; }
  ;

items
  : %empty                   { $$ = NULL; }
  | items item               { $$ = stmt_append($1, $2); }
  ;

/* item: model | dim | input | param | let | for | mesh | train | checkpoint */
item
  : MODEL STRING             { $$ = ast_stmt(S_MODEL, @$); $$->name = $2; $$->name_loc = @2; }
  | DIM IDENT '=' expr       { $$ = ast_stmt(S_DIM, @$); $$->name = $2; $$->name_loc = @2; $$->value = $4; }
  | INPUT IDENT ':' IDENT '[' exprlist ']'
                             { $$ = ast_stmt(S_INPUT, @$); $$->name = $2; $$->name_loc = @2;
                               $$->dtype = $4; $$->dtype_loc = @4; $$->dims = $6; }
  | PARAM IDENT ':' '[' exprlist ']' param_clauses
                             { $$ = $7; $$->loc = @$; $$->name = $2; $$->name_loc = @2; $$->dims = $5; }
  | IDENT '=' expr           { $$ = ast_stmt(S_LET, @$); $$->name = $1; $$->name_loc = @1; $$->value = $3; }
  | FOR IDENT IN expr DOTDOT expr '{' items '}'
                             { $$ = ast_stmt(S_FOR, @$); $$->name = $2; $$->name_loc = @2;
                               $$->value = $4; $$->hi = $6; $$->body = $8; }
  | FOR IDENT IN expr '{' items '}'
                             { diag_error(ctx->src, @4, "a layer range needs a start and an end: write 'for %s in 0..N'", $2);
                               free($2); ast_free_expr($4); ast_free_stmts($6); $$ = NULL; }
  | MESH '{' settings '}'    { $$ = ast_stmt(S_MESH, @$); $$->settings = $3; }
  | TRAIN '{' settings '}'   { $$ = ast_stmt(S_TRAIN, @$); $$->settings = $3; }
  | CHECKPOINT '{' settings '}'
                             { $$ = ast_stmt(S_CHECKPOINT, @$); $$->settings = $3; }
  | error                    { $$ = NULL; }
  ;

/* param_clauses: ('as' STRING | 'init' init_value | 'tp' IDENT)* */
param_clauses
  : %empty                   { $$ = ast_stmt(S_PARAM, NOLOC); }
  | param_clauses AS STRING  { $$ = $1; clause_set(ctx, $$, 0, @3, $3, NULL); }
  | param_clauses INIT init_value
                             { $$ = $1; clause_set(ctx, $$, 1, @3, NULL, $3); }
  | param_clauses TP IDENT   { $$ = $1; clause_set(ctx, $$, 2, @3, $3, NULL); }
  ;

init_value
  : IDENT                    { $$ = ast_expr(E_NAME, @$); $$->name = $1; }
  | call
  ;

settings
  : %empty                   { $$ = NULL; }
  | settings setting         { $$ = setting_append($1, $2); }
  | settings ','             { $$ = $1; }
  ;

setting
  : setting_key '=' setting_value { $$ = ast_setting($1, @1, $3); }
  ;

setting_key
  : IDENT
  | TP                       { $$ = xstrdup("tp"); }
  ;

setting_value
  : expr
  | expr DOTDOT expr         { $$ = ast_expr(E_RANGE, @$); $$->lhs = $1; $$->rhs = $3;
                               DEPTH($$, ($1->depth > $3->depth ? $1->depth : $3->depth) + 1); }
  | WORD                     { $$ = ast_expr(E_WORD, @$); $$->name = $1; }
  | STRING                   { $$ = ast_expr(E_STR, @$); $$->name = $1; }
  ;

/* expr: integer/float arithmetic on dims, or tensor dataflow with + and * */
expr
  : INT                      { $$ = ast_expr(E_INT, @$); $$->ival = $1; }
  | FLOAT                    { $$ = ast_expr(E_FLOAT, @$); $$->fval = $1; }
  | IDENT                    { $$ = ast_expr(E_NAME, @$); $$->name = $1; }
  | call
  | '(' expr ')'             { $$ = $2; $$->loc = @$; DEPTH($$, $$->depth + 1); }
  | '-' expr %prec NEG       { $$ = ast_expr(E_NEG, @$); $$->lhs = $2; DEPTH($$, $2->depth + 1); }
  | expr '+' expr            { $$ = bin('+', $1, $3, @$); DEPTH($$, $$->depth); }
  | expr '-' expr            { $$ = bin('-', $1, $3, @$); DEPTH($$, $$->depth); }
  | expr '*' expr            { $$ = bin('*', $1, $3, @$); DEPTH($$, $$->depth); }
  | expr '/' expr            { $$ = bin('/', $1, $3, @$); DEPTH($$, $$->depth); }
  | expr '%' expr            { $$ = bin('%', $1, $3, @$); DEPTH($$, $$->depth); }
  ;

call
  : IDENT '(' args ')'       { $$ = ast_expr(E_CALL, @$); $$->name = $1; $$->name_loc = @1; $$->args = $3;
                               int d = 0;
                               for (Arg *a = $3; a; a = a->next) d = a->val->depth > d ? a->val->depth : d;
                               DEPTH($$, d + 1); }
  ;

args
  : %empty                   { $$ = NULL; }
  | arglist
  ;

arglist
  : arg
  | arglist ',' arg          { $$ = arg_append($1, $3); }
  ;

arg
  : expr                     { $$ = ast_arg(NULL, NOLOC, $1); }
  | IDENT '=' expr           { $$ = ast_arg($1, @1, $3); }
  ;

exprlist
  : expr                     { $$ = ast_arg(NULL, NOLOC, $1); }
  | exprlist ',' expr        { $$ = arg_append($1, ast_arg(NULL, NOLOC, $3)); }
  ;

%%

static void yyerror(Loc *loc, yyscan_t scanner, ParseCtx *ctx, const char *msg) {
  (void)scanner;
  if (ctx->lex_reported) { ctx->lex_reported = 0; return; }
  if (!strcmp(msg, "memory exhausted")) /* bison's stack: YYMAXDEPTH open parentheses, calls or blocks */
    diag_error(ctx->src, *loc, "nested too deeply: more than %d open parentheses, calls and blocks", YYMAXDEPTH);
  else diag_error(ctx->src, *loc, "%s", msg);
}

static int too_deep(ParseCtx *ctx, Expr *e, int depth) {
  e->depth = depth;
  if (depth <= AST_MAX_DEPTH) return 0;
  diag_error(ctx->src, e->loc, "expression nested too deeply: %d levels, at most %d (give parts of it names with 'dim' "
             "or '=')", depth, AST_MAX_DEPTH);
  return 1;
}

static Expr *bin(char op, Expr *l, Expr *r, Loc loc) {
  Expr *e = ast_expr(E_BIN, loc);
  e->op = op;
  e->lhs = l;
  e->rhs = r;
  e->depth = 1 + (l->depth > r->depth ? l->depth : r->depth);
  return e;
}

/* Lists are built in order in constant time per item: the first node keeps the last in `tail`. */
static Arg *arg_append(Arg *list, Arg *a) {
  if (!list) {
    a->tail = a;
    return a;
  }
  list->tail->next = a;
  list->tail = a;
  return list;
}

static Stmt *stmt_append(Stmt *list, Stmt *s) {
  if (!s) return list;
  if (!list) {
    s->tail = s;
    return s;
  }
  list->tail->next = s;
  list->tail = s;
  return list;
}

static Setting *setting_append(Setting *list, Setting *s) {
  if (!list) {
    s->tail = s;
    return s;
  }
  list->tail->next = s;
  list->tail = s;
  return list;
}

/* A parameter clause may appear once; which: 0 'as', 1 'init', 2 'tp'. */
static void clause_set(ParseCtx *ctx, Stmt *p, int which, Loc at, char *str, Expr *e) {
  static const char *names[] = {"as", "init", "tp"};
  int dup = (which == 0 && p->ckpt) || (which == 1 && p->value) || (which == 2 && p->role);
  if (dup) {
    diag_error(ctx->src, at, "parameter clause '%s' given twice", names[which]);
    free(str);
    ast_free_expr(e);
    return;
  }
  if (which == 0) { p->ckpt = str; p->ckpt_loc = at; }
  if (which == 1) p->value = e;
  if (which == 2) { p->role = str; p->role_loc = at; }
}

Ast *ast_parse(Src *src) {
  ParseCtx ctx = {.src = src, .ast = xcalloc(1, sizeof(Ast))};
  yyscan_t scanner;
  if (yylex_init_extra(&ctx, &scanner)) diag_fatal("cannot start the scanner");
  yy_scan_bytes(src->text, (int)src->len, scanner);
  int rc = yyparse(scanner, &ctx);
  yylex_destroy(scanner);
  if (rc || src->nerrors) {
    ast_free(ctx.ast);
    return NULL;
  }
  return ctx.ast;
}
