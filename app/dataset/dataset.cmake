# The dataset mode (`mimi dataset`, docs/DATASETS.md), linked into mimi_app.
target_sources(mimi_app PRIVATE
  app/dataset/tar.cpp app/dataset/entries.cpp app/dataset/manifest.cpp app/dataset/plan.cpp app/dataset/dataset_json.cpp
  app/dataset/item_files.cpp app/dataset/journal.cpp app/dataset/done_record.cpp app/dataset/shard_writer.cpp app/dataset/prefetch.cpp app/dataset/encode.cpp
  app/dataset/status.cpp app/dataset/verify.cpp app/dataset/reader.cpp app/dataset/slots.cpp app/dataset/options.cpp)
