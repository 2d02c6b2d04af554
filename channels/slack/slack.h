/*
 * slack.h - the Slack channel adapter (channels/slack/slack.c): Events API and
 * Socket Mode in, chat.postMessage out. docs/channels/slack.md.
 */
#ifndef SB_CHANNELS_SLACK_H
#define SB_CHANNELS_SLACK_H

#include "channels/channel.h"

extern const struct channel_ops channel_slack_ops;

#endif
