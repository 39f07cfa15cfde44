// The api room's door: everything the gRPC transport (server/rpc/) and the server's composition
// (server/app/) use of the request logic. The handlers of the unary RPCs are declared by the
// generated server/api/v1_handlers.h, which the *_requests.h headers include.
#pragma once

#include "server/api/api_methods.h"       // The RPCs' policies, read from the proto's options.
#include "server/api/caller.h"            // Who calls: principal, method, resource.
#include "server/api/density_requests.h"  // DensityService's handlers' state.
#include "server/api/enum_check.h"        // Unknown enum values refused before any handler.
#include "server/api/job_convert.h"       // Job records as protos (the watch stream writes them).
#include "server/api/job_requests.h"      // JobService's handlers' state; the watch's steps.
#include "server/api/model_requests.h"    // ModelService's handlers' state.
#include "server/api/model_streams.h"     // The upload's and export's gRPC-free sessions.
