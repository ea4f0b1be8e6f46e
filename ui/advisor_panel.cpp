// SPDX-License-Identifier: GPL-3.0-or-later
#include "advisor_panel.h"

#include <QFileInfo>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPointer>
#include <QPushButton>
#include <QScrollArea>
#include <QThread>
#include <QVBoxLayout>

#include "engine/advise/advisor.h"
#include "engine/backend/backend.h"
#include "engine/ladder/rungs.h"
#include "run_summary.h"
#include "engine/store/run_store.h"

using json = nlohmann::json;

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString factorText(const json& v) {
  return v.is_number() ? QStringLiteral("%1×").arg(v.get<double>(), 0, 'f', 2) : QObject::tr("not bounded");
}

bool gpuPresent() {
  for (const auto& [id, name] : tb::available_devices())
    if (id.rfind("cuda", 0) == 0) return true;
  return false;
}

}  // namespace

AdvisorPanel::AdvisorPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  header_ = new QLabel(this);
  header_->setWordWrap(true);
  layout->addWidget(header_);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  cards_ = new QWidget(scroll);
  cardsLayout_ = new QVBoxLayout(cards_);
  cardsLayout_->addStretch(1);
  scroll->setWidget(cards_);
  layout->addWidget(scroll, 1);
  connect(&rerun_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus) {
    const QString err = QString::fromUtf8(rerun_.readAllStandardError()).trimmed();
    emit statusMessage(code == 0 ? tr("Re-run with the advice finished.")
                                 : tr("The re-run ended with code %1. %2").arg(code).arg(err.right(300)));
    emit rerunFinished(runId_, code);
    showRun(runId_);  // the outcome: predicted bound next to the measured result
  });
  render();
}

AdvisorPanel::~AdvisorPanel() {
  if (rerun_.state() != QProcess::NotRunning) {
    rerun_.terminate();
    if (!rerun_.waitForFinished(3000)) rerun_.kill();
  }
}

void AdvisorPanel::showRun(qint64 runId) {
  runId_ = runId;
  computing_ = true;
  render();
  // Reading every step series of a long run takes a while: off the GUI thread.
  const std::string path = databasePath_.toStdString();
  struct Result {
    json advice, reruns, config;
    QString error, cannotRerun;
  };
  auto result = std::make_shared<Result>();
  QThread* worker = QThread::create([path, runId, result] {
    try {
      tb::RunStore store(path, tb::RunStore::Mode::ReadOnly);
      tb::RunEvidence e = tb::evidence_from_store(store, runId);
      e.gpu_present = gpuPresent();
      result->advice = json::array();
      for (const tb::Advice& a : tb::advise(e)) result->advice.push_back(a.to_json());
      result->reruns = tb::advice_outcomes(store, runId);
      result->config = e.config;
      // A re-run trains the run's configuration here: a GPU run needs a GPU.
      if (e.on_gpu() && !e.gpu_present)
        result->cannotRerun = tr("Run %1 trained on %2; this machine has no GPU the engine can use, so it "
                                 "cannot be re-run here. Re-run it on a machine with a GPU, or open the run "
                                 "database there.")
                                  .arg(runId)
                                  .arg(qs(e.device));
    } catch (const std::exception& ex) {
      result->error = QString::fromUtf8(ex.what());
    }
  });
  QPointer<AdvisorPanel> self(this);
  connect(worker, &QThread::finished, this, [self, worker, result, runId] {
    worker->deleteLater();
    if (!self || self->runId_ != runId) return;
    self->computing_ = false;
    self->advice_ = result->advice.is_null() ? json::array() : result->advice;
    self->reruns_ = result->reruns.is_null() ? json::array() : result->reruns;
    self->error_ = result->error;
    self->config_ = result->config;
    self->cannotRerun_ = result->cannotRerun;
    self->render();
    emit self->adviceReady(runId);
  });
  worker->start();
}

QStringList AdvisorPanel::rules() const {
  QStringList out;
  for (const json& a : advice_) out << qs(a.value("rule", ""));
  return out;
}

QJsonObject AdvisorPanel::ladderFor(const QString& rule) const {
  for (const json& a : advice_) {
    if (qs(a.value("rule", "")) != rule) continue;
    const std::vector<std::string> rungs = tb::rungs_for_changes(a["changes"]);
    if (rungs.empty() || !config_.is_object()) return {};
    std::string list;
    for (const std::string& r : rungs) list += (list.empty() ? "" : ",") + r;
    QJsonObject c = RunSummary::toQt(config_);
    c.insert(QStringLiteral("ladder_rungs"), qs(list));
    return c;
  }
  return {};
}

bool AdvisorPanel::applyAndRerun(const QString& rule) {
  if (rerun_.state() != QProcess::NotRunning || !rules().contains(rule)) return false;
  if (!cannotRerun_.isEmpty()) {
    emit statusMessage(cannotRerun_);
    return false;
  }
  if (!QFileInfo(enginePath_).isExecutable()) {
    emit statusMessage(tr("No engine at '%1'.").arg(enginePath_));
    return false;
  }
  rerun_.start(enginePath_, {QStringLiteral("--db"), databasePath_, QStringLiteral("advise"), QString::number(runId_),
                             QStringLiteral("--apply"), rule, QStringLiteral("-q")});
  if (!rerun_.waitForStarted(10000)) return false;
  emit statusMessage(tr("Re-running run %1 with '%2' applied…").arg(runId_).arg(rule));
  render();
  return true;
}

void AdvisorPanel::render() {
  while (cardsLayout_->count() > 1) {
    QLayoutItem* item = cardsLayout_->takeAt(0);
    delete item->widget();
    delete item;
  }
  if (runId_ == 0) {
    header_->setText(tr("Open a stored run to see what to try next."));
    return;
  }
  if (computing_) {
    header_->setText(tr("Reading run %1's measurements…").arg(runId_));
    return;
  }
  if (!error_.isEmpty()) {
    header_->setText(tr("Could not read run %1: %2").arg(runId_).arg(error_));
    return;
  }
  header_->setText(advice_.empty()
                       ? tr("Run %1: no rule fires; nothing in its measurements points at a trick.").arg(runId_)
                       : tr("Run %1: %2 recommendation(s). Each names the measurement that made it fire and the "
                            "most it can gain from the step's breakdown.")
                             .arg(runId_)
                             .arg(advice_.size()) +
                       (cannotRerun_.isEmpty() || advice_.empty() ? QString() : QStringLiteral("\n") + cannotRerun_));
  int i = 0;
  for (const json& a : advice_) {
    auto* box = new QGroupBox(qs(a.value("title", "")), cards_);
    auto* v = new QVBoxLayout(box);
    auto* text = new QLabel(box);
    text->setWordWrap(true);
    text->setTextFormat(Qt::RichText);
    text->setText(tr("<b>Evidence:</b> %1<br><b>Fires on:</b> %2<br><b>Try:</b> %3<br><b>At most:</b> %4 — %5")
                      .arg(qs(a.value("evidence", "")).toHtmlEscaped(), qs(a.value("threshold", "")).toHtmlEscaped(),
                           qs(a.value("action", "")).toHtmlEscaped(), factorText(a["max_speedup"]),
                           qs(a.value("bound_reason", "")).toHtmlEscaped()));
    v->addWidget(text);
    auto* row = new QHBoxLayout;
    auto* apply = new QPushButton(tr("Apply and re-run"), box);
    apply->setToolTip(tr("Train this run's configuration with %1 and link the two runs; the measured "
                         "speed-up then shows next to the bound.")
                          .arg(qs(a["changes"].dump())));
    apply->setEnabled(rerun_.state() == QProcess::NotRunning && !a["changes"].empty() && cannotRerun_.isEmpty());
    if (!cannotRerun_.isEmpty()) apply->setToolTip(cannotRerun_);
    const QString rule = qs(a.value("rule", ""));
    connect(apply, &QPushButton::clicked, this, [this, rule] { applyAndRerun(rule); });
    row->addStretch(1);
    if (const json& cites = a.value("cites", json()); cites.is_object()) {
      const QString layer = qs(cites.value("layer", "")), phase = qs(cites.value("phase", ""));
      auto* show = new QPushButton(tr("Show in Layers"), box);
      show->setToolTip(tr("The Layers tab with %1's %2 row selected and ringed on the roofline: the "
                          "figure this advice cites").arg(layer, phase));
      connect(show, &QPushButton::clicked, this, [this, layer, phase] { emit showLayerRequested(layer, phase); });
      row->addWidget(show);
    }
    const QJsonObject ladder = ladderFor(rule);
    if (!ladder.isEmpty()) {
      auto* add = new QPushButton(tr("Add to ladder"), box);
      add->setToolTip(tr("Open the Ladder page with this run as the baseline and the rungs %1, to measure "
                         "the change with repeats.")
                          .arg(ladder.value(QLatin1String("ladder_rungs")).toString()));
      connect(add, &QPushButton::clicked, this, [this, ladder] { emit addToLadderRequested(ladder); });
      row->addWidget(add);
    }
    row->addWidget(apply);
    v->addLayout(row);
    cardsLayout_->insertWidget(i++, box);
  }
  if (!reruns_.empty()) {
    auto* box = new QGroupBox(tr("Re-runs with advice applied"), cards_);
    auto* v = new QVBoxLayout(box);
    for (const json& r : reruns_) {
      auto* l = new QLabel(tr("Run %1 (%2, %3): predicted %4, measured %5")
                               .arg(r["run_id"].get<qint64>())
                               .arg(qs(r.value("rule", "")), qs(r.value("status", "")),
                                    r["max_speedup"].is_number() ? tr("at most %1").arg(factorText(r["max_speedup"]))
                                                                 : tr("no bound"),
                                    factorText(r["measured_speedup"])),
                           box);
      v->addWidget(l);
    }
    cardsLayout_->insertWidget(i, box);
  }
}
