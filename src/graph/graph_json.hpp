// SPDX-License-Identifier: MIT
// A StepGraph as JSON ("moesim-graph" version 1, docs/graph-format.md): the one file that the
// simulator and a GPU executor both consume.
//
// Use export_graph_json to hand a built graph to another tool, import_graph_json to run one that
// was written elsewhere. The text is deterministic (same graph, same bytes) and round-trips
// exactly: import then export gives back the same bytes, and every double comes back bit for bit.
//
// Caveats: the import checks structure, names, types, ranges and indices (a dependency must name
// an earlier op, an effect an existing buffer), not the graph's semantics (memory balance, p2p
// pairing, collective order: see graph_checks.hpp). Files are whole-document JSON, so a graph is
// held in memory twice while it is written or read (about 11 MB of text for the default scenario).
#pragma once

#include <string>

#include "graph/step_graph.hpp"

namespace moesim {

// Writes the graph as JSON text (deterministic: same graph, same bytes). Throws std::logic_error
// when the graph breaks an invariant that the format relies on (a non-finite size, op ranges that
// are not laid out op after op as ProgramWriter lays them out): those are bugs of the builder.
std::string export_graph_json(const StepGraph& graph);

// Reads it back; throws InputError naming `file` and the JSON path on any malformed input
// (unknown or missing key, wrong type, unknown enum name, index out of range, e.g. a dep that
// does not point to an earlier op, an effect naming a buffer that does not exist).
StepGraph import_graph_json(const std::string& text, const std::string& file);

}  // namespace moesim
