/*
 * modules.c - the gateway modules the daemon starts, in order.
 */
#include "gateway/module.h"

const struct gateway_module_ops *const gateway_modules[] = {
	NULL,
};
