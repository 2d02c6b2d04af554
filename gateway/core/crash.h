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
 *   SB_CRASH_NAME=S  the first point named S sends SIGKILL (for a point
 *                    whose number other threads' points make vary).
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
/* Reads SB_CRASH_AT, SB_CRASH_NAME and SB_CRASH_LOG and removes them from the environment,
 * so that no child (a command, the CLI a test starts from a hook) counts
 * points of its own or dies in the gateway's place. Call first in main(),
 * before any thread or child exists. */
void sb_crash_arm(void);
#define SB_CRASH_POINT(name) sb_crash_point(name)
#define SB_CRASH_ARM() sb_crash_arm()
#else
#define SB_CRASH_POINT(name) ((void)0)
#define SB_CRASH_ARM() ((void)0)
#endif

#endif
