/*
 * telegram.h - the Telegram channel adapter (channels/telegram/telegram.c): one
 * instance per bot in `channels.telegram.accounts`.
 */
#ifndef SB_CHANNELS_TELEGRAM_H
#define SB_CHANNELS_TELEGRAM_H

#include "channels/channel.h"

extern const struct channel_ops channel_telegram_ops;

#endif
