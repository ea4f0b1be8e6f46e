// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QString>

// Where the workbench's own files are, found from the executable's folder so that
// an installed copy and a build tree both work: both lay out
//   <prefix>/bin/trainbench, <prefix>/bin/trainbench-engine,
//   <prefix>/share/trainbench/{presets,tricks}/
// (the build tree is the prefix build/, see packaging/CMakeLists.txt). The
// relative path bin -> share/trainbench comes from CMake's GNUInstallDirs.
namespace InstallPaths {

// $TRAINBENCH_DATA_DIR when set, else <executable dir>/TRAINBENCH_BIN_TO_DATA.
// Warns once (naming the folder) when it does not exist.
QString dataDir();

// dataDir() + "/" + relative, e.g. dataFile("tricks/tricks.json").
QString dataFile(const QString& relative);

// <executable dir>/name: a program installed beside this one.
QString besideExecutable(const QString& name);

}  // namespace InstallPaths
