// SPDX-License-Identifier: MIT
// The CPU side of one rank per process (backend/rank_bootstrap.hpp, backend/exec_result.hpp), run
// by tests/app/ranks_mpi_test.py as one process and under `mpirun -np 2, 3, 4` on a machine
// without GPUs: placement and local ranks against Open MPI's own, GPU mapping, the duplicate-GPU
// check, agreeing on input errors, the communicator plan every process derives, the unique ids
// process 0 broadcasts, and the measurements every rank sends process 0, assembled into the same
// result as one process assembles its threads'. The collective test cases call the same
// collectives on every process and use CHECK, never REQUIRE, after the first collective, so that
// a failure on one process cannot leave the others waiting.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "backend/exec_result.hpp"
#include "backend/rank_bootstrap.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"
#include "graph/queues.hpp"
#include "scenario/scenario_spec.hpp"
#include "search/distributed.hpp"

using namespace moesim;
using namespace moesim::cuda;

namespace {

Distributed* the_job = nullptr;  // set by main before the tests run
Distributed& job() { return *the_job; }

Scenario scenario(const char* file) { return load_scenario(read_input(file, "scenarios", "SCENARIO")); }

// The 1-GPU Llama slice as data parallelism over `n` GPUs of an 8-GPU H200 node (two micro-batches
// per rank and step).
Scenario llama_over(int n) {
  const InputText base = read_input("scenarios/calibration/llama-8b-slice-1gpu.json", "scenarios", "SCENARIO");
  nlohmann::json j = nlohmann::json::parse(base.text);
  j["hardware"] = "../../hardware/h200-hgx.json";
  j["num_devices"] = n;
  j["parallel"]["fsdp"]["replicate"] = n;
  j["batch"]["global_batch_size"] = 2 * n;
  return load_scenario(InputText{base.name, j.dump(), base.embedded});
}

// A made-up measurement of rank r, step m: distinct, hand-checkable op times per rank and step.
RankMeasurement made_up(const StepGraph& g, int32_t r, int steps) {
  RankMeasurement out;
  out.rank = r;
  const Program& p = g.programs[static_cast<size_t>(g.plan.program_of(r))];
  for (int m = 0; m < steps; ++m) {
    MeasuredStep s;
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const Picoseconds start = static_cast<Picoseconds>(i) * 1000 + r * 7 + ((m * 5 + 3) % steps) * 100000;
      s.op_start.push_back(start);
      s.op_end.push_back(start + 900 + r);
    }
    s.run.rank = r;
    s.run.device = r % 2;
    s.run.device_name = "made-up GPU " + std::to_string(r);
    s.run.persistent_bytes = 1e9 + r;
    s.run.context_bytes = 5e8;
    s.run.executor_bytes = 2e8 + m;
    s.run.slab_bytes = 3e8;
    s.run.slab_waits = 4 + m;
    s.run.device_bytes = 2e9 + r * 10 + m;
    s.run.program_order_peak_bytes = 1.5e9;
    s.run.end = s.op_end.back();
    out.steps.push_back(std::move(s));
  }
  return out;
}

}  // namespace

TEST_CASE("placement: nodes in the order of their lowest rank, local ranks in rank order") {
  // Ranks 0-5 on three nodes whose leaders are 0, 2 and 5; rank 4 sits on the first node.
  const std::vector<int> leaders{0, 0, 2, 2, 0, 5};
  const ProcessPlacement p4 = place_process(leaders, 4);
  CHECK(p4.node == 0);
  CHECK(p4.local_rank == 2);
  CHECK(p4.local_size == 3);
  CHECK(p4.num_nodes == 3);
  CHECK(p4.node_of == std::vector<int>{0, 0, 1, 1, 0, 2});
  const ProcessPlacement p3 = place_process(leaders, 3);
  CHECK(p3.node == 1);
  CHECK(p3.local_rank == 1);
  CHECK(p3.local_size == 2);
  const ProcessPlacement p5 = place_process(leaders, 5);
  CHECK(p5.local_rank == 0);
  CHECK(p5.local_size == 1);
}

TEST_CASE("placement over the job: one node here, local ranks as Open MPI numbers them") {
  const ProcessPlacement p = place_process(job());
  CHECK(p.rank == job().rank());
  CHECK(p.size == job().size());
  CHECK(p.num_nodes == 1);  // every process of this test runs on this machine
  CHECK(p.node == 0);
  CHECK(p.local_rank == job().rank());
  CHECK(p.local_size == job().size());
  if (const char* ompi = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) CHECK(p.local_rank == std::atoi(ompi));
  if (const char* ompi = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) CHECK(p.local_size == std::atoi(ompi));
}

TEST_CASE("GPU of a process: its local rank, GPU 0 when it sees only its own, else an input error") {
  const ProcessPlacement p = place_process({0, 0, 0, 0}, 2);
  CHECK(device_of(p, 4, "mpirun") == 2);
  CHECK(device_of(p, 8, "mpirun") == 2);
  CHECK(device_of(p, 1, "mpirun") == 0);
  try {
    (void)device_of(p, 2, "mpirun");
    FAIL("4 processes on 2 GPUs must be refused");
  } catch (const InputError& e) {
    CHECK(e.file() == "mpirun");
    CHECK(std::string(e.what()).find("runs 4 process(es) but 2 GPU(s) are visible") != std::string::npos);
  }
  CHECK_THROWS_AS((void)device_of(p, 0, "mpirun"), InputError);
}

TEST_CASE("two processes of a node on one GPU are refused on every process; on two nodes they are not") {
  const ProcessPlacement here = place_process(job());
  // Distinct GPUs: no error.
  CHECK_NOTHROW(check_distinct_devices(job(), here, "0000:" + std::to_string(job().rank()), "mpirun"));
  // All on the same GPU: every process fails alike, naming ranks 0 and 1.
  bool failed = false;
  std::string message;
  try {
    check_distinct_devices(job(), here, "0000:19:00.0", "mpirun");
  } catch (const InputError& e) {
    failed = true;
    message = e.what();
  }
  CHECK(failed == (job().size() > 1));
  if (job().size() > 1) CHECK(message.find("ranks 0 and 1 would drive the same GPU (0000:19:00.0) on node 0") != std::string::npos);
  // Each process on a node of its own: the same bus id on every node is fine.
  std::vector<int> own_nodes;
  for (int r = 0; r < job().size(); ++r) own_nodes.push_back(r);
  CHECK_NOTHROW(check_distinct_devices(job(), place_process(own_nodes, job().rank()), "0000:19:00.0", "mpirun"));
}

TEST_CASE("an input error on some processes is thrown on all, the lowest failing rank's") {
  const int last = job().size() - 1;
  CHECK_NOTHROW(agree_on_input(job(), [] {}));
  // Only the last process fails.
  try {
    agree_on_input(job(), [&] {
      if (job().rank() == last) throw InputError("scenario.json", "/num_devices", "made up on rank " + std::to_string(last));
    });
    FAIL("every process must throw");
  } catch (const InputError& e) {
    CHECK(e.file() == "scenario.json");
    CHECK(e.path() == "/num_devices");
    CHECK(e.message() == "made up on rank " + std::to_string(last));
  }
  // Every process fails with its own message: rank 0's wins everywhere.
  try {
    agree_on_input(job(), [&] { throw InputError("f", "", "rank " + std::to_string(job().rank())); });
    FAIL("every process must throw");
  } catch (const InputError& e) {
    CHECK(e.message() == "rank 0");
    CHECK(e.path().empty());
  }
}

TEST_CASE("unique ids: made on process 0 only, the same on every process, in order") {
  int made = 0;
  const std::vector<std::string> ids = share_ids(job(), 5, [&] {
    ++made;
    return "nccl-id-" + std::to_string(100 + made);  // 11 bytes each
  });
  CHECK(made == (job().rank() == 0 ? 5 : 0));
  CHECK(ids == std::vector<std::string>{"nccl-id-101", "nccl-id-102", "nccl-id-103", "nccl-id-104", "nccl-id-105"});
  CHECK(share_ids(job(), 0, [] { return std::string("x"); }).empty());
  const auto everyone = job().all_gather(ids.back());
  CHECK(std::set<std::string>(everyone.begin(), everyone.end()) == std::set<std::string>{"nccl-id-105"});
}

TEST_CASE("communicator plan: every communication op of every rank has its instance, with the group's members") {
  for (const char* file : {"scenarios/calibration/k3-slice-2gpu.json", "scenarios/calibration/k3-slice-2gpu-pp2.json",
                           "scenarios/calibration/qwen3-moe-slice-2gpu.json"}) {
    CAPTURE(file);
    const Scenario s = scenario(file);
    const StepGraph g = build_step_graph(s);
    const std::vector<CommunicatorInstance> plan = plan_communicators(g);
    CHECK(!plan.empty());
    // No instance twice.
    std::set<std::pair<int, std::vector<int64_t>>> groups;
    std::set<std::tuple<int, int64_t, int64_t>> links;
    for (const CommunicatorInstance& c : plan) {
      if (c.communicator < 0) {
        CHECK(links.insert(c.link).second);
        CHECK(c.members == std::vector<int64_t>{std::get<1>(c.link), std::get<2>(c.link)});
      } else {
        CHECK(groups.insert({c.communicator, c.members}).second);
        CHECK(c.members.size() >= 2);
      }
    }
    int64_t checked = 0;
    for (int64_t r = 0; r < g.plan.num_ranks(); ++r) {
      for (const Op& op : g.programs[static_cast<size_t>(g.plan.program_of(r))].ops) {
        if (!is_communication(op.kind)) continue;
        if (is_pipeline_p2p(op)) {
          const auto link = pipeline_link(g, r, op);
          if (std::get<1>(link) < 0) continue;
          CHECK(links.contains(link));
          CHECK((std::get<1>(link) == r) == (op.kind == OpKind::send));
        } else {
          if (g.plan.group_size(op.group) <= 1) continue;
          CHECK(groups.contains({communicator_of(op), g.plan.members(r, op.group)}));
        }
        ++checked;
      }
    }
    CHECK(checked > 0);
    // Every process derives the same plan (the order the communicators are created in).
    std::string mine;
    for (const CommunicatorInstance& c : plan) {
      mine += std::to_string(c.communicator) + ":";
      for (int64_t m : c.members) mine += std::to_string(m) + ",";
      mine += ";";
    }
    const auto all = job().all_gather(mine);
    CHECK(std::set<std::string>(all.begin(), all.end()).size() == 1);
  }
}

TEST_CASE("collective layouts: within nodes, then across nodes in powers of two per node") {
  // 4 processes on one node: groups of 2 and 4, none across nodes.
  auto one = collective_layouts(place_process({0, 0, 0, 0}, 0));
  REQUIRE(one.size() == 2);
  CHECK(!one[0].inter_node);
  CHECK(one[0].groups == std::vector<std::vector<int>>{{0, 1}});
  CHECK(one[1].groups == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  // 2 nodes of 2 (ranks 0, 2 on one; 1, 3 on the other): pairs on each node at once; across
  // nodes 1 and 2 per node.
  auto two = collective_layouts(place_process({0, 1, 0, 1}, 3));
  REQUIRE(two.size() == 3);
  CHECK(two[0].n == 2);
  CHECK(two[0].groups == std::vector<std::vector<int>>{{0, 2}, {1, 3}});
  CHECK(two[1].inter_node);
  CHECK(two[1].n == 2);
  CHECK(two[1].ranks_per_node == 1);
  CHECK(two[1].groups == std::vector<std::vector<int>>{{0, 1}});
  CHECK(two[2].n == 4);
  CHECK(two[2].nodes == 2);
  CHECK(two[2].groups == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  // Uneven nodes (3 + 1): a pair on the big node only; across nodes one per node.
  auto uneven = collective_layouts(place_process({0, 0, 0, 3}, 0));
  REQUIRE(uneven.size() == 2);
  CHECK(uneven[0].groups == std::vector<std::vector<int>>{{0, 1}});
  CHECK(uneven[1].groups == std::vector<std::vector<int>>{{0, 3}});
  // One process: nothing to measure.
  CHECK(collective_layouts(place_process({0}, 0)).empty());
}

TEST_CASE("a rank's measurement survives the trip as bytes; damaged bytes are refused") {
  const StepGraph g = build_step_graph(llama_over(2));
  const RankMeasurement m = made_up(g, 1, 3);
  const std::string bytes = encode_measurement(m);
  const RankMeasurement back = decode_measurement(bytes);
  CHECK(back.rank == 1);
  REQUIRE(back.steps.size() == 3);
  for (size_t s = 0; s < 3; ++s) {
    CHECK(back.steps[s].op_start == m.steps[s].op_start);
    CHECK(back.steps[s].op_end == m.steps[s].op_end);
    CHECK(back.steps[s].run.device_name == m.steps[s].run.device_name);
    CHECK(back.steps[s].run.device_bytes == m.steps[s].run.device_bytes);
    CHECK(back.steps[s].run.slab_waits == m.steps[s].run.slab_waits);
    CHECK(back.steps[s].run.end == m.steps[s].run.end);
  }
  CHECK_THROWS_AS(decode_measurement(bytes.substr(0, bytes.size() - 1)), std::runtime_error);
  CHECK_THROWS_AS(decode_measurement(bytes + "x"), std::runtime_error);
  CHECK_THROWS_AS(decode_measurement(std::string(16, '\0')), std::runtime_error);
}

TEST_CASE("gathered measurements give process 0 the result one process assembles from the same times") {
  const int n = job().size();
  if (8 % n != 0) {  // a plan fills whole 8-GPU nodes or divides one: 1, 2, 4 or 8 processes here
    MESSAGE("no plan over " << n << " H200s of one node: left out");
    return;
  }
  const StepGraph g = build_step_graph(llama_over(n));
  REQUIRE(g.plan.num_ranks() == n);
  constexpr int kSteps = 3;
  // What each process measured for its own rank, sent to process 0.
  const std::vector<std::string> all = job().gather(encode_measurement(made_up(g, job().rank(), kSteps)));
  if (job().rank() != 0) {
    CHECK(all.empty());
    return;
  }
  std::vector<RankMeasurement> gathered, local;
  for (const std::string& b : all) gathered.push_back(decode_measurement(b));
  for (int r = 0; r < n; ++r) local.push_back(made_up(g, r, kSteps));
  const ExecResult a = assemble_result(g, gathered);
  const ExecResult b = assemble_result(g, local);
  CHECK(a.step_times == b.step_times);
  CHECK(a.step_time == b.step_time);
  CHECK(a.slowest_rank == b.slowest_rank);
  CHECK(fingerprint(a.timeline) == fingerprint(b.timeline));
  CHECK(a.timeline.memory.size() == b.timeline.memory.size());
  // Hand-computed: measured step m is shifted by ((5m + 3) mod 3) x 100 ns = 0, 200, 100 ns, so
  // the steps end at those shifts plus the last op's end on the slowest rank (the last rank: each
  // rank starts its ops 7 ps and ends them 1 ps later than the one before); the median step is
  // measured step 2.
  const Program& p = g.programs.front();
  const Picoseconds last_end = static_cast<Picoseconds>(p.ops.size() - 1) * 1000 + (n - 1) * 7 + 900 + (n - 1);
  CHECK(a.step_times == std::vector<Picoseconds>{last_end, 200000 + last_end, 100000 + last_end});
  CHECK(a.step_time == 100000 + last_end);
  CHECK(a.slowest_rank == n - 1);
  CHECK(a.timeline.step_end == a.step_time);
  REQUIRE(a.ranks.size() == static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    CHECK(a.ranks[static_cast<size_t>(r)].rank == r);
    CHECK(a.ranks[static_cast<size_t>(r)].device_name == "made-up GPU " + std::to_string(r));
    CHECK(a.ranks[static_cast<size_t>(r)].slab_waits == 4 + 2);  // measured step 2's
    CHECK(a.ranks[static_cast<size_t>(r)].timeline_peak_bytes >= a.ranks[static_cast<size_t>(r)].persistent_bytes);
  }
  CHECK(a.timeline.records.size() == static_cast<size_t>(n) * p.ops.size());
  // A rank missing is refused.
  gathered.pop_back();
  CHECK_THROWS_AS(assemble_result(g, gathered), std::runtime_error);
}

int main(int argc, char** argv) {
  // One process, or one MPI rank per process under mpirun (search/distributed.hpp).
  const std::unique_ptr<Distributed> job = start_distributed();
  the_job = job.get();
  doctest::Context context(argc, argv);
  const int failed = context.run();
  // Every process's verdict, so that process 0's exit code speaks for the job.
  const auto verdicts = job->all_gather(failed ? "F" : "");
  for (const std::string& v : verdicts) {
    if (!v.empty()) return 1;
  }
  return 0;
}
