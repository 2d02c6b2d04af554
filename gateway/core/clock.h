/*
 * clock.h - the gateway's two clocks.
 *
 * Durations, timeouts, deadlines, backoffs, windows and token buckets are
 * measured on the monotonic clock, which never steps. The wall clock
 * (CLOCK_REALTIME) is only for timestamps that are stored, shown or compared
 * with a peer's (received_at, due_at, lastEventAt, a signature's timestamp):
 * it steps when NTP, an operator or a resumed VM sets it, and a step backward
 * must never stall a poll, a send or a timer. uv_now() is monotonic too.
 *
 * All functions: any thread.
 */
#ifndef SB_CORE_CLOCK_H
#define SB_CORE_CLOCK_H

#include <stdint.h>

/* Milliseconds / nanoseconds / seconds on the monotonic clock, from an
 * arbitrary origin: only differences mean something. */
int64_t clock_mono_ms(void);
uint64_t clock_mono_ns(void);
double clock_mono_s(void);

/* Unix milliseconds on the wall clock.
 *
 * Tests of a stepped clock set SWITCHBOARD_TEST_WALL_STEP="<at_ms>:<ms>":
 * from the moment the monotonic clock (system-wide, so the test knows it)
 * reads at_ms, every reading is moved by ms (negative: backward), as a clock
 * that was set would be. */
int64_t clock_wall_ms(void);

#endif
