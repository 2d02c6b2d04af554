/*
 * invariant.h - SB_ASSERT, for what the code relies on being true.
 *
 *	SB_ASSERT(s->outstanding > 0, LOG_I("outstanding", s->outstanding),
 *	          LOG_S("op", store_op_name(op->kind)));
 *
 * When the condition is false the process writes a crash report - the
 * condition, where it is, the state the caller names (LOG_S / LOG_I / LOG_D
 * fields, up to 16), and a backtrace - to the log and to stderr, and aborts:
 * going on would break what the invariant protects (a message accepted
 * twice, a claim never given back, memory). A supervisor restarts the
 * process, and the store's crash rules then hold (docs/architecture.md).
 *
 * Not for input: bad input, a full queue or a failed allocation gets an
 * error code. Compiled into every build, release too: the checks are cheap
 * and a crash with a report beats corruption without one. Any thread.
 */
#ifndef SB_CORE_INVARIANT_H
#define SB_CORE_INVARIANT_H

#include "gateway/core/log.h"

#define SB_ASSERT(...) SB_ASSERT_(__VA_ARGS__, LOG_END)
#define SB_ASSERT_(cond, ...)                                                                      \
	do {                                                                                       \
		if (__builtin_expect(!(cond), 0))                                                  \
			sb_assert_fail(#cond, __FILE__, __LINE__, __func__, __VA_ARGS__);          \
	} while (0)

/* Writes the crash report and aborts. The variadic part is log fields ended
 * by LOG_END (SB_ASSERT adds it). */
_Noreturn void sb_assert_fail(const char *expr, const char *file, int line, const char *func,
                              ...);

#endif
