/*
 * crash.h - numbered crash points, for enumerating every durable step.
 *
 *	SB_CRASH_POINT("store.commit.before");
 *
 * Built with -DSB_CRASH_POINTS=ON (CMake option SB_CRASH_POINTS: on in the
 * sanitizer test build, off in release), each SB_CRASH_POINT is a point where
 * the process may be killed, placed at every durable step of the message path
 * (docs/architecture.md, "Crash points"). Points are numbered in the order
 * they are reached, by one process-wide counter:
 *
 *   SB_CRASH_AT=N    the N-th point reached sends SIGKILL to the process
 *                    (not exit: nothing is flushed, no handler runs).
 *   SB_CRASH_LOG=F   every point reached appends "<count> <name>\n" to F
 *                    (O_APPEND, one write per line), so a test can count
 *                    the points a conversation mix reaches.
 *
 * Names are for the log; the number is what SB_CRASH_AT counts. Without the
 * build option the macro expands to nothing: no call, no counter, no cost.
 * Any thread.
 */
#ifndef SB_CORE_CRASH_H
#define SB_CORE_CRASH_H

#ifdef SB_CRASH_POINTS
/* Counts a crash point named NAME (a string literal); logs it when
 * SB_CRASH_LOG is set and kills the process when it is the SB_CRASH_AT-th. */
void sb_crash_point(const char *name);
#define SB_CRASH_POINT(name) sb_crash_point(name)
#else
#define SB_CRASH_POINT(name) ((void)0)
#endif

#endif
