/*
 * modules.c - the gateway modules the daemon starts, in order.
 */
#include "gateway/module.h"
#include "gateway/control/control.h"
#include "gateway/http/openai_api.h"
#include "gateway/ui/ui.h"

const struct gateway_module_ops *const gateway_modules[] = {
    &control_module,
    &openai_api_module,
    &ui_module,
    NULL,
};
