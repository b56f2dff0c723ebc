/* The Code Mode runner: QuickJS inside a WebAssembly module, driven by the host (crates/sandbox).
 *
 * One instance runs one program and is then thrown away. The module has no ambient authority: every
 * way out is one of the imports below (module "sy"), and the host decides what each does. Tool calls
 * are split in two so that Promise.all really overlaps them: call_start() hands a call to the host
 * and returns at once; when the JavaScript job queue is empty and the program still waits,
 * call_wait() blocks until any started call finishes, and its promise is settled here.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "quickjs.h"

#define IMPORT(name) __attribute__((import_module("sy"), import_name(#name)))
#define EXPORT(name) __attribute__((export_name(#name)))

/* Starts a tool call; returns its id (the host traps when a limit is passed). */
IMPORT(call_start) int32_t sy_call_start(const char *server, uint32_t server_len, const char *tool,
                                         uint32_t tool_len, const char *args, uint32_t args_len);
/* Blocks until a started call finishes; returns its id and writes [len, ok] of its answer. */
IMPORT(call_wait) int32_t sy_call_wait(uint32_t *len_ok);
/* Copies the answer that call_wait announced into buf (len bytes). */
IMPORT(call_read) void sy_call_read(char *buf);
/* console.log and friends: level 0 log, 1 info, 2 warn, 3 error. */
IMPORT(log) void sy_log(int32_t level, const char *msg, uint32_t len);
/* The program's outcome: ok = 1 with its JSON value, ok = 0 with an error message. */
IMPORT(result) void sy_result(int32_t ok, const char *msg, uint32_t len);

#define MAX_PENDING 4096

static JSValue pending_funcs[MAX_PENDING][2];
static uint8_t pending_used[MAX_PENDING];
static int pending_count;

/* A buffer for the host to fill, zero-terminated (QuickJS parses JSON only from terminated strings). */
EXPORT(sy_alloc) void *sy_alloc(uint32_t size) {
    char *p = malloc((size_t)size + 1);
    if (p) p[size] = 0;
    return p;
}

static void report_string(JSContext *ctx, int ok, JSValueConst value) {
    size_t len;
    const char *s = JS_ToCStringLen(ctx, &len, value);
    if (s) {
        sy_result(ok, s, (uint32_t)len);
        JS_FreeCString(ctx, s);
    } else {
        static const char msg[] = "the value could not be converted to a string";
        sy_result(0, msg, sizeof msg - 1);
    }
}

/* An exception as "Name: message" plus its stack, which names lines of the program. */
static void report_exception(JSContext *ctx, JSValue exc) {
    if (JS_IsError(exc)) {
        JSValue stack = JS_GetPropertyStr(ctx, exc, "stack");
        JSValue text = JS_ToString(ctx, exc);
        size_t tlen = 0, slen = 0;
        const char *t = JS_ToCStringLen(ctx, &tlen, text);
        const char *s = JS_IsString(stack) ? JS_ToCStringLen(ctx, &slen, stack) : NULL;
        size_t total = tlen + (s ? slen + 1 : 0);
        char *buf = malloc(total + 1);
        if (buf && t) {
            memcpy(buf, t, tlen);
            if (s) {
                buf[tlen] = '\n';
                memcpy(buf + tlen + 1, s, slen);
            }
            sy_result(0, buf, (uint32_t)total);
        } else {
            report_string(ctx, 0, exc);
        }
        free(buf);
        if (t) JS_FreeCString(ctx, t);
        if (s) JS_FreeCString(ctx, s);
        JS_FreeValue(ctx, text);
        JS_FreeValue(ctx, stack);
    } else {
        report_string(ctx, 0, exc);
    }
    JS_FreeValue(ctx, exc);
}

/* __sy_call(server, tool, argsJson) -> Promise */
static JSValue js_call(JSContext *ctx, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    if (argc < 3) return JS_ThrowTypeError(ctx, "internal: __sy_call takes 3 arguments");
    size_t slen, tlen, alen;
    const char *server = JS_ToCStringLen(ctx, &slen, argv[0]);
    const char *tool = JS_ToCStringLen(ctx, &tlen, argv[1]);
    const char *args = JS_ToCStringLen(ctx, &alen, argv[2]);
    JSValue ret = JS_EXCEPTION;
    if (server && tool && args) {
        int32_t id = sy_call_start(server, (uint32_t)slen, tool, (uint32_t)tlen, args, (uint32_t)alen);
        if (id < 0 || id >= MAX_PENDING || pending_used[id]) {
            ret = JS_ThrowInternalError(ctx, "internal: bad call id");
        } else {
            ret = JS_NewPromiseCapability(ctx, pending_funcs[id]);
            if (!JS_IsException(ret)) {
                pending_used[id] = 1;
                pending_count++;
            }
        }
    }
    if (server) JS_FreeCString(ctx, server);
    if (tool) JS_FreeCString(ctx, tool);
    if (args) JS_FreeCString(ctx, args);
    return ret;
}

/* __sy_log(level, text) */
static JSValue js_log(JSContext *ctx, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    int32_t level = 0;
    if (argc < 2 || JS_ToInt32(ctx, &level, argv[0])) return JS_UNDEFINED;
    size_t len;
    const char *s = JS_ToCStringLen(ctx, &len, argv[1]);
    if (!s) return JS_EXCEPTION;
    sy_log(level, s, (uint32_t)len);
    JS_FreeCString(ctx, s);
    return JS_UNDEFINED;
}

/* Settles the promise of one finished call with its answer (a JSON value, or an error message). */
static int settle_one(JSContext *ctx) {
    uint32_t len_ok[2] = {0, 0};
    int32_t id = sy_call_wait(len_ok);
    if (id < 0 || id >= MAX_PENDING || !pending_used[id]) return -1;
    char *buf = malloc(len_ok[0] + 1);
    if (!buf) return -1;
    sy_call_read(buf);
    buf[len_ok[0]] = 0;
    JSValue arg;
    int fn;
    if (len_ok[1]) {
        arg = JS_ParseJSON(ctx, buf, len_ok[0], "<tool result>");
        fn = 0;
        if (JS_IsException(arg)) {
            arg = JS_GetException(ctx);
            fn = 1;
        }
    } else {
        JSValue msg = JS_NewStringLen(ctx, buf, len_ok[0]);
        arg = JS_NewError(ctx);
        JS_DefinePropertyValueStr(ctx, arg, "message", msg, JS_PROP_WRITABLE | JS_PROP_CONFIGURABLE);
        fn = 1;
    }
    free(buf);
    JSValue r = JS_Call(ctx, pending_funcs[id][fn], JS_UNDEFINED, 1, (JSValueConst *)&arg);
    JS_FreeValue(ctx, r);
    JS_FreeValue(ctx, arg);
    JS_FreeValue(ctx, pending_funcs[id][0]);
    JS_FreeValue(ctx, pending_funcs[id][1]);
    pending_used[id] = 0;
    pending_count--;
    return 0;
}

/* Builds `tools` and `console` from the catalogue ({"server": ["tool", ...]}); the host functions
 * are captured by closures and then removed from the global object, so the program sees only these. */
static const char PRELUDE[] =
    "(function (catalog) {\n"
    "  'use strict';\n"
    "  const call = globalThis.__sy_call, log = globalThis.__sy_log;\n"
    "  delete globalThis.__sy_call; delete globalThis.__sy_log;\n"
    "  const show = (v) => { if (typeof v === 'string') return v;\n"
    "    if (v instanceof Error) return String(v);\n"
    "    try { const j = JSON.stringify(v); return j === undefined ? String(v) : j; } catch (e) { return String(v); } };\n"
    "  const line = (args) => Array.prototype.map.call(args, show).join(' ');\n"
    "  const console = Object.freeze({\n"
    "    log() { log(0, line(arguments)); }, info() { log(1, line(arguments)); },\n"
    "    debug() { log(0, line(arguments)); },\n"
    "    warn() { log(2, line(arguments)); }, error() { log(3, line(arguments)); } });\n"
    "  const servers = {};\n"
    "  for (const server of Object.keys(catalog)) {\n"
    "    const fns = {};\n"
    "    for (const tool of catalog[server]) {\n"
    "      fns[tool] = function (args) {\n"
    "        if (args === undefined) args = {};\n"
    "        if (args === null || typeof args !== 'object' || Array.isArray(args))\n"
    "          return Promise.reject(new TypeError('tools.' + server + '.' + tool + ' takes one object of arguments'));\n"
    "        let json;\n"
    "        try { json = JSON.stringify(args); } catch (e) { return Promise.reject(e); }\n"
    "        return call(server, tool, json);\n"
    "      };\n"
    "    }\n"
    "    servers[server] = new Proxy(Object.freeze(fns), { get(t, name) {\n"
    "      if (typeof name === 'string' && !Object.prototype.hasOwnProperty.call(t, name) && name !== 'then')\n"
    "        throw new TypeError('no tool \"' + name + '\" on server \"' + server + '\" for this key');\n"
    "      return t[name]; } });\n"
    "  }\n"
    "  const tools = new Proxy(Object.freeze(servers), { get(t, name) {\n"
    "    if (typeof name === 'string' && !Object.prototype.hasOwnProperty.call(t, name) && name !== 'then')\n"
    "      throw new TypeError('no MCP server \"' + name + '\" for this key');\n"
    "    return t[name]; } });\n"
    "  Object.defineProperty(globalThis, 'tools', { value: tools, enumerable: false });\n"
    "  Object.defineProperty(globalThis, 'console', { value: console, enumerable: false });\n"
    "})";

/* Made by sy_init: the host runs it once, then snapshots the whole linear memory and starts every execution
 * from that image (copy-on-write), so no program pays for creating QuickJS's runtime and context. */
static JSRuntime *snap_rt;
static JSContext *snap_ctx;
static JSValue snap_setup;

static int init_engine(void) {
    JSRuntime *rt = JS_NewRuntime();
    if (!rt) return 1;
    JSContext *ctx = JS_NewContext(rt);
    if (!ctx) return 1;
    JSValue global = JS_GetGlobalObject(ctx);
    JS_SetPropertyStr(ctx, global, "__sy_call", JS_NewCFunction(ctx, js_call, "__sy_call", 3));
    JS_SetPropertyStr(ctx, global, "__sy_log", JS_NewCFunction(ctx, js_log, "__sy_log", 2));
    JS_FreeValue(ctx, global);
    JSValue setup = JS_Eval(ctx, PRELUDE, sizeof PRELUDE - 1, "<prelude>", JS_EVAL_TYPE_GLOBAL);
    if (JS_IsException(setup)) return 1;
    snap_rt = rt;
    snap_ctx = ctx;
    snap_setup = setup;
    return 0;
}

/* Prepares the engine ahead of any program; returns 0 when ready. */
EXPORT(sy_init) int32_t sy_init(void) { return snap_rt ? 0 : init_engine(); }

static const char HEAD[] = "(async () => {\n";
static const char TAIL[] = "\n})()";

/* Runs one program. Returns 0 when a result was reported, 1 on an engine failure before that. */
EXPORT(sy_run)
int32_t sy_run(const char *catalog, uint32_t catalog_len, const char *code, uint32_t code_len,
               uint32_t memory_limit, uint32_t stack_limit) {
    if (sy_init()) return 1;
    JSRuntime *rt = snap_rt;
    JSContext *ctx = snap_ctx;
    JSValue setup = snap_setup;
    if (memory_limit) JS_SetMemoryLimit(rt, memory_limit);
    if (stack_limit) JS_SetMaxStackSize(rt, stack_limit);

    /* The prelude with its catalogue. */
    JSValue cat = JS_ParseJSON(ctx, catalog, catalog_len, "<catalog>");
    if (JS_IsException(cat)) {
        JS_FreeValue(ctx, setup);
        report_exception(ctx, JS_GetException(ctx));
        return 0;
    }
    JSValue done = JS_Call(ctx, setup, JS_UNDEFINED, 1, (JSValueConst *)&cat);
    JS_FreeValue(ctx, cat);
    JS_FreeValue(ctx, setup);
    if (JS_IsException(done)) {
        report_exception(ctx, JS_GetException(ctx));
        return 0;
    }
    JS_FreeValue(ctx, done);

    /* The program: the body of an async function, so `await` and `return` work at its top level. */
    size_t total = sizeof HEAD - 1 + code_len + sizeof TAIL - 1;
    char *src = malloc(total + 1);
    if (!src) return 1;
    memcpy(src, HEAD, sizeof HEAD - 1);
    memcpy(src + sizeof HEAD - 1, code, code_len);
    memcpy(src + sizeof HEAD - 1 + code_len, TAIL, sizeof TAIL - 1);
    src[total] = 0;
    JSValue promise = JS_Eval(ctx, src, total, "program.js", JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_STRICT);
    free(src);
    if (JS_IsException(promise)) {
        report_exception(ctx, JS_GetException(ctx));
        return 0;
    }

    for (;;) {
        JSContext *job_ctx;
        int r;
        while ((r = JS_ExecutePendingJob(rt, &job_ctx)) > 0) {
        }
        if (r < 0) {
            report_exception(ctx, JS_GetException(job_ctx));
            return 0;
        }
        JSPromiseStateEnum state = JS_PromiseState(ctx, promise);
        if (state == JS_PROMISE_FULFILLED) {
            JSValue value = JS_PromiseResult(ctx, promise);
            JSValue json = JS_IsUndefined(value) ? JS_NewString(ctx, "null")
                                                 : JS_JSONStringify(ctx, value, JS_UNDEFINED, JS_UNDEFINED);
            JS_FreeValue(ctx, value);
            if (JS_IsException(json)) {
                report_exception(ctx, JS_GetException(ctx));
            } else if (JS_IsUndefined(json)) {
                sy_result(1, "null", 4);
            } else {
                report_string(ctx, 1, json);
            }
            JS_FreeValue(ctx, json);
            return 0;
        }
        if (state == JS_PROMISE_REJECTED) {
            report_exception(ctx, JS_PromiseResult(ctx, promise));
            return 0;
        }
        if (pending_count == 0) {
            static const char msg[] = "the program awaits a promise that nothing will ever settle";
            sy_result(0, msg, sizeof msg - 1);
            return 0;
        }
        if (settle_one(ctx) < 0) return 1;
    }
}
