// SPDX-License-Identifier: GPL-3.0-or-later
// Closes the region begin_emulated.h opened. (No include guard.)
#undef cuda
