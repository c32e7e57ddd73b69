// `mimi dataset plan | encode | status | verify`: the corpus mode's command line (its work is in
// app/dataset/, docs/DATASETS.md).
#include "app/cli/command.h"
#include "app/dataset/dataset.h"

namespace mimi::app {
namespace {

namespace ds = mimi::app::dataset;

class Dataset : public Command {
 public:
  ds::PlanOptions plan;
  ds::EncodeShardOptions enc;
  ds::StatusOptions status;
  ds::VerifyOptions verify;
  CLI::App *dp = nullptr, *de = nullptr, *dst = nullptr, *dv = nullptr;

  void check() override {
    refuse_inert({{de->get_option("--readers"), enc.batch > 1, "--batch N with N > 1 (its threads read ahead for the slots)"}});
  }
  std::vector<std::string> inputs() const override { return *dp ? plan.manifests : std::vector<std::string>{}; }
  int run(const Common& common) override {
    if (*dp) return ds::make_plan(plan), kOk;
    if (*de) {
      enc.engine = {common.weights, common.config, common.device, common.threads, Parts{}, common.no_cache};
      enc.quiet = common.quiet;
      return ds::encode_shard(enc);
    }
    if (*dst) return ds::status(status);
    if (*dv) return ds::verify(verify);
    return kUsage;
  }
  bool batched() const override { return *de && enc.batch > 1; }
};

}  // namespace

std::unique_ptr<Command> add_dataset(CLI::App& app, Common& common) {
  auto cmd = std::make_unique<Dataset>();
  ds::PlanOptions& ds_plan = cmd->plan;
  ds::EncodeShardOptions& ds_enc = cmd->enc;
  ds::StatusOptions& ds_status = cmd->status;
  ds::VerifyOptions& ds_verify = cmd->verify;
  CLI::App* dset = cmd->sub = app.add_subcommand("dataset", "Tokenize a corpus as shards under Slurm, GNU parallel, ... "
                                                            "(plan once, then one `encode --shard I/N` per worker; docs/DATASETS.md)");
  dset->require_subcommand(1);
  CLI::App* dp = cmd->dp = dset->add_subcommand("plan", "Manifests -> PLAN/: items cut into shards balanced by duration");
  dp->add_option("manifests", ds_plan.manifests,
                 "JSON Lines (path|audio_filepath, id, duration, start, end, channel), Kaldi wav.scp (+ segments), "
                 "a list of paths, or a directory")
      ->required();
  dp->add_option("-o,--output", ds_plan.out, "Plan directory")->required();
  dp->add_option("--shards", ds_plan.shards, "Number of shards")->check(CLI::Range(1, 99999));
  dp->add_option("--shard-hours", ds_plan.shard_hours, "Hours of audio per shard (sets the number of shards)")
      ->check(finite_in(1e-6, 1e9));
  // ranges on every number: CLI11 reads '' (an unset shell variable) as 0, which both take as valid
  dp->add_option("--probe-threads", ds_plan.probe_threads, "Files whose headers are read at once [default: 4 per CPU]")
      ->check(CLI::Range(0, 65536));
  dp->add_flag("--skip-bad", ds_plan.skip_bad,
               "Leave bad manifest entries out of the plan (each still printed; listed in PLAN/skipped.txt) "
               "instead of refusing it");
  dp->add_flag("-f,--force", ds_plan.force, "Replace an existing plan (shards already encoded from it become invalid)");
  dp->add_flag("-q,--quiet", common.quiet, "Only errors on stderr");
  dp->add_flag("-v,--verbose", common.verbose, "More detail on stderr");

  CLI::App* de = cmd->de =
      dset->add_subcommand("encode", "Encode one shard of a plan into OUT/shards/ (resumable; done shards are skipped)");
  de->add_option("--plan", ds_enc.plan, "Plan directory")->required();
  de->add_option("--shard", ds_enc.shard, "I/N, or auto: from SLURM_ARRAY_TASK_ID, SLURM_PROCID, RANK or "
                                          "JOB_COMPLETION_INDEX")
      ->required();
  de->add_option("-o,--output", ds_enc.out, "Output directory")->required();
  de->add_option("--n-q", ds_enc.n_q, "Codebooks to keep")->capture_default_str()->check(CLI::Range(1, 32));
  de->add_option("--max-errors", ds_enc.max_errors, "Fail the shard beyond this many bad items: a count or a "
                                                    "percentage of its items (10, 2%) [default: no limit]");
  de->add_flag("--retry-errors", ds_enc.retry_errors, "Redo the items that failed (the others are kept as they are)");
  de->add_option("--sync-items", ds_enc.sync_items, "Make the journal durable every N items ...")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  de->add_option("--sync-seconds", ds_enc.sync_seconds, "... or every S seconds")
      ->capture_default_str()
      ->check(finite_in(0, 1e9));
  de->add_option("--batch", ds_enc.batch,
                 "Encode N items at once in the slots of one batched plan (for GPUs); the shard's bytes are the "
                 "same as one at a time")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  de->add_option("--readers", ds_enc.readers,
                 "With --batch: threads that read, downmix and resample the items' next chunks while the slots "
                 "compute (0: read between steps)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  de->add_option("--weights", common.weights, "Weights, as for encode [default: $MIMI_WEIGHTS, then the HF cache]");
  de->add_option("--config", common.config, "Model config JSON, as for encode");
  de->add_flag("--no-cache", common.no_cache, "No prepared-weights cache, as for encode");
  de->add_option("--device", common.device, "cpu, cuda[:i] or hip[:i]")->capture_default_str();
  de->add_option("--threads", common.threads, "CPU threads (0 = the CPUs this process may use)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  de->add_flag("-q,--quiet", common.quiet, "Only errors on stderr (no progress)");
  de->add_flag("-v,--verbose", common.verbose, "More detail on stderr");

  CLI::App* dst = cmd->dst =
      dset->add_subcommand("status", "Done / partial / failed / todo per shard, hours and ETA (stdout)");
  dst->add_option("out", ds_status.out, "Output directory")->required();
  dst->add_option("--plan", ds_status.plan, "Plan directory [default: the one OUT/dataset.json names]");
  dst->add_flag("--todo", ds_status.todo, "Only the shards that are not done");
  dst->add_option("--format", ds_status.format, "table, json, or ranges (unfinished shards as 3,17-19 for sbatch --array)")
      ->check(CLI::IsMember({"table", "json", "ranges"}))
      ->capture_default_str();
  dst->add_flag("-q,--quiet", common.quiet, "Only errors on stderr");

  CLI::App* dv = cmd->dv = dset->add_subcommand("verify", "Re-read every shard: index, sha256, frame counts against the plan, "
                                                          "code range; exit 0 only when all is well");
  dv->add_option("out", ds_verify.out, "Output directory")->required();
  dv->add_option("--plan", ds_verify.plan, "Plan directory [default: the one OUT/dataset.json names]");
  dv->add_flag("-q,--quiet", common.quiet, "Only errors on stderr");
  return cmd;
}

}  // namespace mimi::app
