// SPDX-License-Identifier: GPL-3.0-or-later
// The GUI's reader of the engine's JSON-lines event stream: any line (cut
// short by a killed engine, not JSON, JSON of the wrong shape) is handled.
#include <cstddef>
#include <cstdint>

#include <QByteArray>
#include <QJsonObject>

#include "engine_process.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  EngineProcess process(QStringLiteral("/nonexistent/trainbench-engine"),
                        QStringLiteral("/nonexistent/runs.db"), QJsonObject());
  const QByteArray input(reinterpret_cast<const char*>(data), static_cast<qsizetype>(size));
  for (const QByteArray& line : input.split('\n')) process.handleLine(line);
  (void)process.lastWords();
  (void)process.runId();
  return 0;
}
