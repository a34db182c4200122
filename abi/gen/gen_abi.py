#!/usr/bin/env python3
"""Generates rankwire-abi's view of the MPI 5.0 standard ABI from one table.

Outputs (paths relative to the `abi/` crate; all are committed, so a fresh clone builds
without Python packages):

  include/mpi.h              the C header (C and C++), for programs, mpi4py and rsmpi
  src/consts.rs              the same types and constants for the Rust implementation
  tests/header/consts.c      a C program printing every constant of the table, compiled
                             by tests/header.rs against our mpi.h and MPICH's mpi_abi.h
  tests/header/table.rs      (name, value) of every constant as the Rust side sees it

Sources: the constant values are the standard's fixed values (MPI 5.0, chapter
"Application Binary Interface"), checked against MPICH 5.0.2's mpi_abi.h (the reference
implementation) by tests/header.rs. The function prototypes come from pympistandard
0.2.0 (the MPI Forum's machine-readable API, `pip install pympistandard==0.2.0`; it has
the MPI 5.0 MPI_Abi_* and MPI_*_toint/fromint functions, EXTRA_FUNCTIONS declares the
former for a release that would not), with two of its C texts fixed (PROTOTYPE_FIXES),
minus the C/Fortran conversions that the ABI replaces by the integer conversions
(MPI_*_c2f -> MPI_*_toint), plus MPIX_Query_cuda_support.

Usage:
  python3 abi/gen/gen_abi.py            write the files
  python3 abi/gen/gen_abi.py --check    exit 1 (and name the files) if any differs
  python3 abi/gen/gen_abi.py --print F  print one output (e.g. include/mpi.h) to stdout
"""

import argparse
import os
import re
import sys

ABI_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------------------
# The table. Each block is "NAME VALUE" lines; '#' starts a comment; a blank line ends
# nothing (blocks are separate strings). Values are Python integer literals.
# ---------------------------------------------------------------------------------------


def pairs(text):
    """[(name, int value)] from a block of "NAME VALUE" lines."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, value = line.split()
        out.append((name, int(value, 0)))
    return out


VERSIONS = pairs("""
    MPI_VERSION         5
    MPI_SUBVERSION      0
    MPI_ABI_VERSION     1
    MPI_ABI_SUBVERSION  0
""")

# Handle types: (C type, tag of its incomplete struct, predefined handles). Handle
# values of the ABI all lie below 0x400; the low bits group them by type.
HANDLE_TYPES = [
    ("MPI_Op", "MPI_ABI_Op", pairs("""
        MPI_OP_NULL   0x20
        MPI_SUM       0x21
        MPI_MIN       0x22
        MPI_MAX       0x23
        MPI_PROD      0x24
        MPI_BAND      0x28
        MPI_BOR       0x29
        MPI_BXOR      0x2a
        MPI_LAND      0x30
        MPI_LOR       0x31
        MPI_LXOR      0x32
        MPI_MINLOC    0x38
        MPI_MAXLOC    0x39
        MPI_REPLACE   0x3c
        MPI_NO_OP     0x3d
    """)),
    ("MPI_Comm", "MPI_ABI_Comm", pairs("""
        MPI_COMM_NULL   0x100
        MPI_COMM_WORLD  0x101
        MPI_COMM_SELF   0x102
    """)),
    ("MPI_Group", "MPI_ABI_Group", pairs("""
        MPI_GROUP_NULL   0x108
        MPI_GROUP_EMPTY  0x109
    """)),
    ("MPI_Win", "MPI_ABI_Win", pairs("MPI_WIN_NULL 0x110")),
    ("MPI_File", "MPI_ABI_File", pairs("MPI_FILE_NULL 0x118")),
    ("MPI_Session", "MPI_ABI_Session", pairs("MPI_SESSION_NULL 0x120")),
    ("MPI_Message", "MPI_ABI_Message", pairs("""
        MPI_MESSAGE_NULL     0x128
        MPI_MESSAGE_NO_PROC  0x129
    """)),
    ("MPI_Info", "MPI_ABI_Info", pairs("""
        MPI_INFO_NULL  0x130
        MPI_INFO_ENV   0x131
    """)),
    ("MPI_Errhandler", "MPI_ABI_Errhandler", pairs("""
        MPI_ERRHANDLER_NULL   0x140
        MPI_ERRORS_ARE_FATAL  0x141
        MPI_ERRORS_ABORT      0x142
        MPI_ERRORS_RETURN     0x143
    """)),
    ("MPI_Request", "MPI_ABI_Request", pairs("MPI_REQUEST_NULL 0x180")),
    ("MPI_Datatype", "MPI_ABI_Datatype", pairs("""
        MPI_DATATYPE_NULL             0x200
        # integers of MPI's own types
        MPI_AINT                      0x201
        MPI_COUNT                     0x202
        MPI_OFFSET                    0x203
        MPI_PACKED                    0x207
        # C integers and floating point
        MPI_SHORT                     0x208
        MPI_INT                       0x209
        MPI_LONG                      0x20a
        MPI_LONG_LONG                 0x20b
        MPI_UNSIGNED_SHORT            0x20c
        MPI_UNSIGNED                  0x20d
        MPI_UNSIGNED_LONG             0x20e
        MPI_UNSIGNED_LONG_LONG        0x20f
        MPI_FLOAT                     0x210
        MPI_C_FLOAT_COMPLEX           0x212
        MPI_CXX_FLOAT_COMPLEX         0x213
        MPI_DOUBLE                    0x214
        MPI_C_DOUBLE_COMPLEX          0x216
        MPI_CXX_DOUBLE_COMPLEX        0x217
        # Fortran types of implementation-defined size
        MPI_LOGICAL                   0x218
        MPI_INTEGER                   0x219
        MPI_REAL                      0x21a
        MPI_COMPLEX                   0x21b
        MPI_DOUBLE_PRECISION          0x21c
        MPI_DOUBLE_COMPLEX            0x21d
        MPI_CHARACTER                 0x21e
        MPI_LONG_DOUBLE               0x220
        MPI_C_LONG_DOUBLE_COMPLEX     0x224
        MPI_CXX_LONG_DOUBLE_COMPLEX   0x225
        # value-index pairs (MINLOC/MAXLOC)
        MPI_FLOAT_INT                 0x228
        MPI_DOUBLE_INT                0x229
        MPI_LONG_INT                  0x22a
        MPI_2INT                      0x22b
        MPI_SHORT_INT                 0x22c
        MPI_LONG_DOUBLE_INT           0x22d
        MPI_2REAL                     0x230
        MPI_2DOUBLE_PRECISION         0x231
        MPI_2INTEGER                  0x232
        MPI_C_BOOL                    0x238
        MPI_CXX_BOOL                  0x239
        MPI_WCHAR                     0x23c
        # fixed-size C types (bits 3..5 give the size class)
        MPI_INT8_T                    0x240
        MPI_UINT8_T                   0x241
        MPI_CHAR                      0x243
        MPI_SIGNED_CHAR               0x244
        MPI_UNSIGNED_CHAR             0x245
        MPI_BYTE                      0x247
        MPI_INT16_T                   0x248
        MPI_UINT16_T                  0x249
        MPI_INT32_T                   0x250
        MPI_UINT32_T                  0x251
        MPI_INT64_T                   0x258
        MPI_UINT64_T                  0x259
        # fixed-size Fortran types
        MPI_LOGICAL1                  0x2c0
        MPI_INTEGER1                  0x2c1
        MPI_LOGICAL2                  0x2c8
        MPI_INTEGER2                  0x2c9
        MPI_REAL2                     0x2ca
        MPI_LOGICAL4                  0x2d0
        MPI_INTEGER4                  0x2d1
        MPI_REAL4                     0x2d2
        MPI_COMPLEX4                  0x2d3
        MPI_LOGICAL8                  0x2d8
        MPI_INTEGER8                  0x2d9
        MPI_REAL8                     0x2da
        MPI_COMPLEX8                  0x2db
        MPI_LOGICAL16                 0x2e0
        MPI_INTEGER16                 0x2e1
        MPI_REAL16                    0x2e2
        MPI_COMPLEX16                 0x2e3
        MPI_COMPLEX32                 0x2eb
    """)),
]

# Second names of predefined handles (same value).
HANDLE_ALIASES = [
    ("MPI_LONG_LONG_INT", "MPI_LONG_LONG", "MPI_Datatype"),
    ("MPI_C_COMPLEX", "MPI_C_FLOAT_COMPLEX", "MPI_Datatype"),
]

# Integer constants, one C enum per group: (comment, entries).
INT_GROUPS = [
    ("Fortran status: size in INTEGERs and positions of the public fields", pairs("""
        MPI_F_STATUS_SIZE  8
        MPI_F_SOURCE       0
        MPI_F_TAG          1
        MPI_F_ERROR        2
    """)),
    ("Error classes (MPI_ERR_ABI is new in MPI 5.0) and MPI_T error codes", pairs("""
        MPI_SUCCESS                    0
        MPI_ERR_BUFFER                 1
        MPI_ERR_COUNT                  2
        MPI_ERR_TYPE                   3
        MPI_ERR_TAG                    4
        MPI_ERR_COMM                   5
        MPI_ERR_RANK                   6
        MPI_ERR_REQUEST                7
        MPI_ERR_ROOT                   8
        MPI_ERR_GROUP                  9
        MPI_ERR_OP                     10
        MPI_ERR_TOPOLOGY               11
        MPI_ERR_DIMS                   12
        MPI_ERR_ARG                    13
        MPI_ERR_UNKNOWN                14
        MPI_ERR_TRUNCATE               15
        MPI_ERR_OTHER                  16
        MPI_ERR_INTERN                 17
        MPI_ERR_PENDING                18
        MPI_ERR_IN_STATUS              19
        MPI_ERR_ACCESS                 20
        MPI_ERR_AMODE                  21
        MPI_ERR_ASSERT                 22
        MPI_ERR_BAD_FILE               23
        MPI_ERR_BASE                   24
        MPI_ERR_CONVERSION             25
        MPI_ERR_DISP                   26
        MPI_ERR_DUP_DATAREP            27
        MPI_ERR_FILE_EXISTS            28
        MPI_ERR_FILE_IN_USE            29
        MPI_ERR_FILE                   30
        MPI_ERR_INFO_KEY               31
        MPI_ERR_INFO_NOKEY             32
        MPI_ERR_INFO_VALUE             33
        MPI_ERR_INFO                   34
        MPI_ERR_IO                     35
        MPI_ERR_KEYVAL                 36
        MPI_ERR_LOCKTYPE               37
        MPI_ERR_NAME                   38
        MPI_ERR_NO_MEM                 39
        MPI_ERR_NOT_SAME               40
        MPI_ERR_NO_SPACE               41
        MPI_ERR_NO_SUCH_FILE           42
        MPI_ERR_PORT                   43
        MPI_ERR_QUOTA                  44
        MPI_ERR_READ_ONLY              45
        MPI_ERR_RMA_ATTACH             46
        MPI_ERR_RMA_CONFLICT           47
        MPI_ERR_RMA_RANGE              48
        MPI_ERR_RMA_SHARED             49
        MPI_ERR_RMA_SYNC               50
        MPI_ERR_SERVICE                51
        MPI_ERR_SIZE                   52
        MPI_ERR_SPAWN                  53
        MPI_ERR_UNSUPPORTED_DATAREP    54
        MPI_ERR_UNSUPPORTED_OPERATION  55
        MPI_ERR_WIN                    56
        MPI_ERR_RMA_FLAVOR             57
        MPI_ERR_PROC_ABORTED           58
        MPI_ERR_VALUE_TOO_LARGE        59
        MPI_ERR_SESSION                60
        MPI_ERR_ERRHANDLER             61
        MPI_ERR_ABI                    62
        MPI_T_ERR_CANNOT_INIT          1001
        MPI_T_ERR_NOT_ACCESSIBLE       1002
        MPI_T_ERR_NOT_INITIALIZED      1003
        MPI_T_ERR_NOT_SUPPORTED        1004
        MPI_T_ERR_MEMORY               1005
        MPI_T_ERR_INVALID              1006
        MPI_T_ERR_INVALID_INDEX        1007
        MPI_T_ERR_INVALID_ITEM         1008
        MPI_T_ERR_INVALID_SESSION      1009
        MPI_T_ERR_INVALID_HANDLE       1010
        MPI_T_ERR_INVALID_NAME         1011
        MPI_T_ERR_OUT_OF_HANDLES       1012
        MPI_T_ERR_OUT_OF_SESSIONS      1013
        MPI_T_ERR_CVAR_SET_NOT_NOW     1014
        MPI_T_ERR_CVAR_SET_NEVER       1015
        MPI_T_ERR_PVAR_NO_WRITE        1016
        MPI_T_ERR_PVAR_NO_STARTSTOP    1017
        MPI_T_ERR_PVAR_NO_ATOMIC       1018
        MPI_ERR_LASTCODE               0x3fff
    """)),
    ("File open modes and window assertions (bit flags)", pairs("""
        MPI_MODE_APPEND           0x1
        MPI_MODE_CREATE           0x2
        MPI_MODE_DELETE_ON_CLOSE  0x4
        MPI_MODE_EXCL             0x8
        MPI_MODE_RDONLY           0x10
        MPI_MODE_RDWR             0x20
        MPI_MODE_SEQUENTIAL       0x40
        MPI_MODE_UNIQUE_OPEN      0x80
        MPI_MODE_WRONLY           0x100
        MPI_MODE_NOCHECK          0x400
        MPI_MODE_NOPRECEDE        0x800
        MPI_MODE_NOPUT            0x1000
        MPI_MODE_NOSTORE          0x2000
        MPI_MODE_NOSUCCEED        0x4000
    """)),
    ("Wildcards and rank sentinels (negative), MPI_UNDEFINED", pairs("""
        MPI_ANY_SOURCE  -1
        MPI_ANY_TAG     -2
        MPI_PROC_NULL   -3
        MPI_ROOT        -4
        MPI_UNDEFINED   -32766
    """)),
    ("Thread levels (ordered), array orders and distributions, combiners, type classes,"
     " comparisons, topologies, split types, locks, window flavors and models, seeks",
     pairs("""
        MPI_THREAD_SINGLE              0
        MPI_THREAD_FUNNELED            1024
        MPI_THREAD_SERIALIZED          2048
        MPI_THREAD_MULTIPLE            4096
        MPI_ORDER_C                    12
        MPI_ORDER_FORTRAN              15
        MPI_DISTRIBUTE_NONE            16
        MPI_DISTRIBUTE_BLOCK           17
        MPI_DISTRIBUTE_CYCLIC          18
        MPI_DISTRIBUTE_DFLT_DARG       19
        MPI_COMBINER_NAMED             101
        MPI_COMBINER_DUP               102
        MPI_COMBINER_CONTIGUOUS        103
        MPI_COMBINER_VECTOR            104
        MPI_COMBINER_HVECTOR           105
        MPI_COMBINER_INDEXED           106
        MPI_COMBINER_HINDEXED          107
        MPI_COMBINER_INDEXED_BLOCK     108
        MPI_COMBINER_HINDEXED_BLOCK    109
        MPI_COMBINER_STRUCT            110
        MPI_COMBINER_SUBARRAY          111
        MPI_COMBINER_DARRAY            112
        MPI_COMBINER_F90_REAL          113
        MPI_COMBINER_F90_COMPLEX       114
        MPI_COMBINER_F90_INTEGER       115
        MPI_COMBINER_RESIZED           116
        MPI_COMBINER_VALUE_INDEX       117
        MPIX_TYPECLASS_LOGICAL         191
        MPI_TYPECLASS_INTEGER          192
        MPI_TYPECLASS_REAL             193
        MPI_TYPECLASS_COMPLEX          194
        MPI_IDENT                      201
        MPI_CONGRUENT                  202
        MPI_SIMILAR                    203
        MPI_UNEQUAL                    204
        MPI_CART                       211
        MPI_GRAPH                      212
        MPI_DIST_GRAPH                 213
        MPI_COMM_TYPE_SHARED           221
        MPI_COMM_TYPE_HW_UNGUIDED      222
        MPI_COMM_TYPE_HW_GUIDED        223
        MPI_COMM_TYPE_RESOURCE_GUIDED  224
        MPI_LOCK_EXCLUSIVE             301
        MPI_LOCK_SHARED                302
        MPI_WIN_FLAVOR_CREATE          311
        MPI_WIN_FLAVOR_ALLOCATE        312
        MPI_WIN_FLAVOR_DYNAMIC         313
        MPI_WIN_FLAVOR_SHARED          314
        MPI_WIN_UNIFIED                321
        MPI_WIN_SEPARATE               322
        MPI_SEEK_CUR                   401
        MPI_SEEK_END                   402
        MPI_SEEK_SET                   403
    """)),
    ("Predefined attribute keys (communicators 50x, windows 60x)", pairs("""
        MPI_KEYVAL_INVALID     0
        MPI_TAG_UB             501
        MPI_IO                 502
        MPI_HOST               503
        MPI_WTIME_IS_GLOBAL    504
        MPI_APPNUM             505
        MPI_LASTUSEDCODE       506
        MPI_UNIVERSE_SIZE      507
        MPI_WIN_BASE           601
        MPI_WIN_DISP_UNIT      602
        MPI_WIN_SIZE           603
        MPI_WIN_CREATE_FLAVOR  604
        MPI_WIN_MODEL          605
    """)),
    ("MPI_T verbosity levels", pairs("""
        MPI_T_VERBOSITY_USER_BASIC     0x09
        MPI_T_VERBOSITY_USER_DETAIL    0x0a
        MPI_T_VERBOSITY_USER_ALL       0x0c
        MPI_T_VERBOSITY_TUNER_BASIC    0x11
        MPI_T_VERBOSITY_TUNER_DETAIL   0x12
        MPI_T_VERBOSITY_TUNER_ALL      0x14
        MPI_T_VERBOSITY_MPIDEV_BASIC   0x21
        MPI_T_VERBOSITY_MPIDEV_DETAIL  0x22
        MPI_T_VERBOSITY_MPIDEV_ALL     0x24
    """)),
    ("MPI_T object bindings", pairs("""
        MPI_T_BIND_NO_OBJECT       1
        MPI_T_BIND_MPI_COMM        2
        MPI_T_BIND_MPI_DATATYPE    3
        MPI_T_BIND_MPI_ERRHANDLER  4
        MPI_T_BIND_MPI_FILE        5
        MPI_T_BIND_MPI_GROUP       6
        MPI_T_BIND_MPI_OP          7
        MPI_T_BIND_MPI_REQUEST     8
        MPI_T_BIND_MPI_WIN         9
        MPI_T_BIND_MPI_MESSAGE     10
        MPI_T_BIND_MPI_INFO        11
        MPI_T_BIND_MPI_SESSION     12
    """)),
    ("MPI_T variable scopes", pairs("""
        MPI_T_SCOPE_CONSTANT  1
        MPI_T_SCOPE_READONLY  2
        MPI_T_SCOPE_LOCAL     3
        MPI_T_SCOPE_GROUP     4
        MPI_T_SCOPE_GROUP_EQ  5
        MPI_T_SCOPE_ALL       6
        MPI_T_SCOPE_ALL_EQ    7
    """)),
    ("MPI_T performance variable classes", pairs("""
        MPI_T_PVAR_CLASS_STATE          1
        MPI_T_PVAR_CLASS_LEVEL          2
        MPI_T_PVAR_CLASS_SIZE           3
        MPI_T_PVAR_CLASS_PERCENTAGE     4
        MPI_T_PVAR_CLASS_HIGHWATERMARK  5
        MPI_T_PVAR_CLASS_LOWWATERMARK   6
        MPI_T_PVAR_CLASS_COUNTER        7
        MPI_T_PVAR_CLASS_AGGREGATE      8
        MPI_T_PVAR_CLASS_TIMER          9
        MPI_T_PVAR_CLASS_GENERIC        10
    """)),
]

# Named C enum types of MPI_T: (type name, entries).
NAMED_ENUMS = [
    ("MPI_T_cb_safety", pairs("""
        MPI_T_CB_REQUIRE_NONE               0x00
        MPI_T_CB_REQUIRE_MPI_RESTRICTED     0x03
        MPI_T_CB_REQUIRE_THREAD_SAFE        0x0f
        MPI_T_CB_REQUIRE_ASYNC_SIGNAL_SAFE  0x3f
    """)),
    ("MPI_T_source_order", pairs("""
        MPI_T_SOURCE_ORDERED    1
        MPI_T_SOURCE_UNORDERED  2
    """)),
]

# Sizes of string buffers (bytes, including the terminating NUL) and MPI_BSEND_OVERHEAD
# (bytes): preprocessor integers, so that they can size arrays in #if too.
SIZE_MACROS = pairs("""
    MPI_MAX_DATAREP_STRING          128
    MPI_MAX_ERROR_STRING            512
    MPI_MAX_INFO_KEY                256
    MPI_MAX_INFO_VAL                1024
    MPI_MAX_LIBRARY_VERSION_STRING  8192
    MPI_MAX_OBJECT_NAME             128
    MPI_MAX_PORT_NAME               1024
    MPI_MAX_PROCESSOR_NAME          256
    MPI_MAX_STRINGTAG_LEN           1024
    MPI_MAX_PSET_NAME_LEN           1024
    MPI_BSEND_OVERHEAD              512
""")

# Address constants: (name, C pointer type, value).
POINTERS = [
    ("MPI_BOTTOM", "void*", 0),
    ("MPI_IN_PLACE", "void*", 1),
    ("MPI_BUFFER_AUTOMATIC", "void*", 2),
    ("MPI_ARGV_NULL", "char**", 0),
    ("MPI_ARGVS_NULL", "char***", 0),
    ("MPI_ERRCODES_IGNORE", "int*", 0),
    ("MPI_STATUS_IGNORE", "MPI_Status*", 0),
    ("MPI_STATUSES_IGNORE", "MPI_Status*", 0),
    ("MPI_UNWEIGHTED", "int*", 10),
    ("MPI_WEIGHTS_EMPTY", "int*", 11),
]

# Other typed constants: (name, C type, value).
TYPED = [
    ("MPI_DISPLACEMENT_CURRENT", "MPI_Offset", -1),
]

# Predefined callbacks (attribute copy/delete, conversion): (name, callback type,
# value). The ABI gives them small integer addresses; an implementation compares a
# callback argument against them before calling it.
PREDEFINED_CALLBACKS = [
    ("MPI_NULL_COPY_FN", "MPI_Copy_function", 0),
    ("MPI_DUP_FN", "MPI_Copy_function", 1),
    ("MPI_NULL_DELETE_FN", "MPI_Delete_function", 0),
    ("MPI_COMM_NULL_COPY_FN", "MPI_Comm_copy_attr_function", 0),
    ("MPI_COMM_DUP_FN", "MPI_Comm_copy_attr_function", 1),
    ("MPI_COMM_NULL_DELETE_FN", "MPI_Comm_delete_attr_function", 0),
    ("MPI_TYPE_NULL_COPY_FN", "MPI_Type_copy_attr_function", 0),
    ("MPI_TYPE_DUP_FN", "MPI_Type_copy_attr_function", 1),
    ("MPI_TYPE_NULL_DELETE_FN", "MPI_Type_delete_attr_function", 0),
    ("MPI_WIN_NULL_COPY_FN", "MPI_Win_copy_attr_function", 0),
    ("MPI_WIN_DUP_FN", "MPI_Win_copy_attr_function", 1),
    ("MPI_WIN_NULL_DELETE_FN", "MPI_Win_delete_attr_function", 0),
    ("MPI_CONVERSION_FN_NULL", "MPI_Datarep_conversion_function", 0),
    ("MPI_CONVERSION_FN_NULL_C", "MPI_Datarep_conversion_function_c", 0),
]

# MPI_T handle types: (C type, struct tag, null/special handles).
TOOL_HANDLES = [
    ("MPI_T_enum", "MPI_T_enum_t", [("MPI_T_ENUM_NULL", 0)]),
    ("MPI_T_cvar_handle", "MPI_T_cvar_handle_t", [("MPI_T_CVAR_HANDLE_NULL", 0)]),
    ("MPI_T_pvar_handle", "MPI_T_pvar_handle_t",
     [("MPI_T_PVAR_HANDLE_NULL", 0), ("MPI_T_PVAR_ALL_HANDLES", 1)]),
    ("MPI_T_pvar_session", "MPI_T_pvar_session_t", [("MPI_T_PVAR_SESSION_NULL", 0)]),
    ("MPI_T_event_registration", "MPI_T_event_registration_t", []),
    ("MPI_T_event_instance", "MPI_T_event_instance_t", []),
]

# Older names of the error handler callback types.
CALLBACK_ALIASES = [
    ("MPI_Comm_errhandler_fn", "MPI_Comm_errhandler_function"),
    ("MPI_File_errhandler_fn", "MPI_File_errhandler_function"),
    ("MPI_Win_errhandler_fn", "MPI_Win_errhandler_function"),
    ("MPI_Session_errhandler_fn", "MPI_Session_errhandler_function"),
]

# The MPI 5.0 ABI's own functions (MPI 5.0, "Application Binary Interface": ABI version,
# ABI info, Fortran INTEGER size and LOGICAL values), declared from here where a
# pympistandard release lacks them (0.2.0 has them, so its text is used), and
# rankwire's extension (Open MPI's name: whether device buffers are accepted).
EXTRA_FUNCTIONS = [
    "int MPI_Abi_get_version(int* abi_major, int* abi_minor)",
    "int MPI_Abi_get_info(MPI_Info* info)",
    "int MPI_Abi_get_fortran_info(MPI_Info* info)",
    "int MPI_Abi_set_fortran_info(MPI_Info info)",
    "int MPI_Abi_get_fortran_booleans(int logical_size, void* logical_true, "
    "void* logical_false, int* is_set)",
    "int MPI_Abi_set_fortran_booleans(int logical_size, void* logical_true, "
    "void* logical_false)",
]
EXTENSION_FUNCTIONS = ["int MPIX_Query_cuda_support(void)"]

# Mistakes in pympistandard 0.2.0's C text, fixed here: (wrong, right).
PROTOTYPE_FIXES = [
    (r"\ldots", "..."),
    ("int MPI_Info_create_env(int argc, char argv[]",
     "int MPI_Info_create_env(int argc, char* argv[]"),
    ("int PMPI_Info_create_env(int argc, char argv[]",
     "int PMPI_Info_create_env(int argc, char* argv[]"),
]

# Handle kinds with integer conversions (MPI 5.0 MPI_<Kind>_toint/fromint), which the
# header also offers under the MPI 4.1 names MPI_<Kind>_c2f/f2c for C code written
# against them (rsmpi's shim uses them).
CONVERTIBLE = ["Comm", "Errhandler", "File", "Group", "Info", "Message", "Op",
               "Request", "Session", "Type", "Win"]


def all_constants():
    """Every constant of the table as (name, kind, C type), kind one of "handle",
    "int", "pointer", "typed", "callback"; in header order."""
    out = [(n, "int", "int") for n, _ in VERSIONS]
    for ctype, _, handles in HANDLE_TYPES:
        out += [(n, "handle", ctype) for n, _ in handles]
    out += [(n, "handle", t) for n, _, t in HANDLE_ALIASES]
    for _, group in INT_GROUPS:
        out += [(n, "int", "int") for n, _ in group]
    for ename, group in NAMED_ENUMS:
        out += [(n, "int", ename) for n, _ in group]
    out += [(n, "int", "int") for n, _ in SIZE_MACROS]
    out += [(n, "pointer", t) for n, t, _ in POINTERS]
    out += [(n, "typed", t) for n, t, _ in TYPED]
    out += [(n, "callback", t) for n, t, _ in PREDEFINED_CALLBACKS]
    for ctype, _, handles in TOOL_HANDLES:
        out += [(n, "handle", ctype) for n, _ in handles]
    return out


# ---------------------------------------------------------------------------------------
# Prototypes from pympistandard.
# ---------------------------------------------------------------------------------------


def load_standard():
    """(callback typedefs, MPI prototypes, PMPI prototypes) as C text without ';'."""
    try:
        import pympistandard as std
    except ImportError:
        sys.exit("gen_abi: pympistandard is not importable; fix: "
                 "pip install pympistandard==0.2.0 (or PYTHONPATH=<unpacked wheel>)")
    if getattr(std, "__version__", "") != "0.2.0":
        sys.exit("gen_abi: pympistandard %s found, 0.2.0 expected (the header is "
                 "generated from that release); fix: pip install pympistandard==0.2.0"
                 % getattr(std, "__version__", "?"))
    std.use_api_version(1)

    def fix(text):
        for wrong, right in PROTOTYPE_FIXES:
            text = text.replace(wrong, right)
        return text

    callbacks = []
    for _, cb in sorted(std.CALLBACKS.items()):
        for expr in (cb.express.iso_c, cb.express.embiggen.iso_c):
            if expr is not None:
                callbacks.append(fix(str(expr)))

    mpi, pmpi = [], []
    for _, proc in sorted(std.PROCEDURES.items()):
        forms = [(proc.express.iso_c, proc.express.profile.iso_c)]
        if proc.has_embiggenment():
            forms.append((proc.express.embiggen.iso_c,
                          proc.express.embiggen.profile.iso_c))
        for plain, prof in forms:
            if plain is None:
                continue
            text = fix(str(plain))
            # The ABI has no Fortran handle/status conversions of its own (MPI_Fint
            # and the Fortran status types are not part of it).
            if "MPI_Fint" in text or "MPI_F08_status" in text:
                continue
            mpi.append(text)
            pmpi.append(fix(str(prof)))
    have = {function_name(t) for t in mpi}
    for text in EXTRA_FUNCTIONS:
        if function_name(text) not in have:
            mpi.append(text)
            pmpi.append(text.replace(" MPI_", " PMPI_", 1))
    return callbacks, mpi, pmpi


def function_name(prototype):
    """The function name of a C prototype text."""
    return re.match(r"[^(]*?(\w+)\(", prototype).group(1)


# ---------------------------------------------------------------------------------------
# C header.
# ---------------------------------------------------------------------------------------

HEADER_TOP = """\
/* mpi.h: the MPI 5.0 standard ABI, as implemented by rankwire (libmpi_abi.so.1).
 *
 * GENERATED by abi/gen/gen_abi.py from its constant table and pympistandard 0.2.0;
 * do not edit (edit the generator and run it). The values are the standard's fixed
 * values (MPI 5.0, chapter "Application Binary Interface"); abi/tests/header.rs checks
 * them against MPICH 5.0.2's mpi_abi.h. A program compiled with this header runs with
 * any implementation's libmpi_abi.so.1, and the other way round.
 *
 * Functions that rankwire does not implement are declared here (the header is the
 * standard's) but absent from the library: such a call is a link error, or "not
 * available" in mpi4py's weak-symbol build. */
#ifndef MPI_H_ABI
#define MPI_H_ABI

#include <stdint.h>

#if defined(__cplusplus)
extern "C" {
#endif
"""

HEADER_BOTTOM = """
#if defined(__cplusplus)
}
#endif

#endif /* MPI_H_ABI */
"""


def c_header(callbacks, mpi, pmpi):
    o = [HEADER_TOP]
    w = o.append
    w("/* Versions of the standard and of its ABI. */")
    for n, v in VERSIONS:
        w("#define %-30s %d" % (n, v))
    w("")
    w("/* Integer types: addresses (MPI_Aint), file offsets (MPI_Offset) and counts")
    w(" * (MPI_Count) are 64-bit; MPI_Fint is the Fortran INTEGER of the usual")
    w(" * compilers (the ABI itself has no Fortran types; MPI_Abi_get_fortran_info says")
    w(" * the size in use). */")
    w("typedef intptr_t MPI_Aint;")
    w("typedef int64_t MPI_Offset;")
    w("typedef MPI_Offset MPI_Count;")
    w("typedef int MPI_Fint;")
    w("")
    w("/* Status: the three public fields, then 5 ints for the implementation (32 bytes). */")
    w("typedef struct {")
    w("    int MPI_SOURCE;")
    w("    int MPI_TAG;")
    w("    int MPI_ERROR;")
    w("    int MPI_internal[5];")
    w("} MPI_Status;")
    w("")
    w("/* Handles: pointers to incomplete structs (one type each, so the compiler")
    w(" * catches a communicator passed as a datatype); predefined values below 0x400. */")
    for ctype, tag, handles in HANDLE_TYPES:
        w("typedef struct %s* %s;" % (tag, ctype))
        for n, v in handles:
            w("#define %-30s ((%s)0x%03x)" % (n, ctype, v))
        for alias, target, t in HANDLE_ALIASES:
            if t == ctype:
                w("#define %-30s %s" % (alias, target))
        w("")
    for comment, group in INT_GROUPS:
        w("/* %s. */" % comment)
        w("enum {")
        for i, (n, v) in enumerate(group):
            w("    %-34s = %d%s" % (n, v, "," if i + 1 < len(group) else ""))
        w("};")
        w("")
    w("/* Buffer sizes (bytes, with the terminating NUL) and the bsend overhead (bytes). */")
    for n, v in SIZE_MACROS:
        w("#define %-30s %d" % (n, v))
    w("")
    w("/* Address constants. */")
    for n, t, v in POINTERS:
        w("#define %-30s ((%s)%d)" % (n, t, v))
    for n, t, v in TYPED:
        w("#define %-30s ((%s)%d)" % (n, t, v))
    w("")
    w("/* Callback types (user reductions, attribute copy/delete, error handlers,")
    w(" * generalized requests, data representations, MPI_T events). */")
    # MPI_T handle types and enums come first: the MPI_T event callbacks use them.
    for ctype, tag, _ in TOOL_HANDLES:
        w("typedef struct %s* %s;" % (tag, ctype))
    for ename, group in NAMED_ENUMS:
        w("typedef enum %s {" % ename)
        for i, (n, v) in enumerate(group):
            w("    %-34s = 0x%02x%s" % (n, v, "," if i + 1 < len(group) else ""))
        w("} %s;" % ename)
    for text in callbacks:
        w("%s;" % c_function_type(text))
    for alias, target in CALLBACK_ALIASES:
        w("typedef %s %s;" % (target, alias))
    w("")
    w("/* Predefined callbacks: small integer addresses fixed by the ABI. */")
    for n, t, v in PREDEFINED_CALLBACKS:
        w("#define %-30s ((%s*)0x%x)" % (n, t, v))
    w("")
    w("/* MPI_T null handles. */")
    for ctype, _, handles in TOOL_HANDLES:
        for n, v in handles:
            w("#define %-30s ((%s)%d)" % (n, ctype, v))
    w("")
    w("/* MPI functions (and their large-count _c forms). */")
    for text in mpi:
        w("%s;" % text)
    w("")
    w("/* Extensions. */")
    for text in EXTENSION_FUNCTIONS:
        w("%s;" % text)
    w("")
    w("/* Profiling interface. */")
    for text in pmpi:
        w("%s;" % text)
    w("")
    w("/* MPI 4.1 names of the handle conversions: in the ABI a Fortran handle is the")
    w(" * handle's integer value (MPI_<Kind>_toint / MPI_<Kind>_fromint). */")
    for k in CONVERTIBLE:
        w("#define MPI_%s_c2f %sMPI_%s_toint" % (k, " " * (10 - len(k)), k))
        w("#define MPI_%s_f2c %sMPI_%s_fromint" % (k, " " * (10 - len(k)), k))
    for k in CONVERTIBLE:
        w("#define PMPI_%s_c2f %sPMPI_%s_toint" % (k, " " * (10 - len(k)), k))
        w("#define PMPI_%s_f2c %sPMPI_%s_fromint" % (k, " " * (10 - len(k)), k))
    o.append(HEADER_BOTTOM)
    return "\n".join(o)


def c_function_type(typedef):
    """'typedef int NAME(args)' -> 'typedef int (NAME)(args)' (a function type)."""
    m = re.match(r"typedef (.+?) (\w+)\((.*)\)$", typedef)
    if not m:
        sys.exit("gen_abi: unexpected callback text: %s" % typedef)
    return "typedef %s (%s)(%s)" % m.groups()


# ---------------------------------------------------------------------------------------
# Rust constants.
# ---------------------------------------------------------------------------------------

RUST_TOP = """\
//! Types and constants of the MPI 5.0 standard ABI, for the Rust side of
//! `libmpi_abi.so.1`.
//!
//! GENERATED by `abi/gen/gen_abi.py` from the same table as `include/mpi.h`; do not
//! edit. Values are the standard's fixed values (MPI 5.0, chapter "Application Binary
//! Interface"; `tests/header.rs` checks them against the C header and MPICH 5.0.2's
//! `mpi_abi.h`).
//!
//! Handles are `usize` (the C side passes pointers to incomplete structs: same size and
//! calling convention); C pointer constants (`MPI_IN_PLACE`, `MPI_STATUS_IGNORE`,
//! predefined callbacks such as `MPI_COMM_DUP_FN`) are `usize` addresses to compare a
//! pointer argument against (`ptr as usize == MPI_IN_PLACE`).
//!
//! (`lib.rs` declares this module `#[rustfmt::skip]`: the generator's layout is kept.)
"""

# C parameter/return types to Rust.
RUST_SCALARS = {
    "void": "c_void", "int": "c_int", "double": "f64", "char": "c_char",
    "MPI_Aint": "MPI_Aint", "MPI_Offset": "MPI_Offset", "MPI_Count": "MPI_Count",
}


def rust_type(ctype):
    """A C parameter type (possibly const, pointer or array) as a Rust type."""
    ctype = ctype.strip()
    const = ctype.startswith("const ")
    if const:
        ctype = ctype[len("const "):]
    stars = ctype.count("*")
    base = ctype.replace("*", "").strip()
    base = RUST_SCALARS.get(base, base)
    for _ in range(stars):
        base = ("*const " if const else "*mut ") + base
    return base


def rust_callback(typedef):
    """'typedef int NAME(T a, U* b, ...)' as a Rust `Option<unsafe extern "C" fn>` alias."""
    m = re.match(r"typedef (.+?) (\w+)\((.*)\)$", typedef)
    ret, name, params = m.groups()
    args = []
    for p in [p.strip() for p in params.split(",")]:
        if p == "...":
            args.append("...")
            continue
        pm = re.match(r"(.*?)(\w+)(\[\])?$", p)
        ptype, pname, arr = pm.groups()
        if arr:
            ptype += "*"
        args.append("%s: %s" % (pname, rust_type(ptype)))
    ret_s = "" if ret == "void" else " -> %s" % rust_type(ret)
    return ("/// `%s` (C callback type; `None` is a null pointer).\n"
            "pub type %s = Option<unsafe extern \"C\" fn(%s)%s>;"
            % (name, name, ", ".join(args), ret_s))


def rust_consts(callbacks):
    o = [RUST_TOP]
    w = o.append
    w("/// `MPI_Aint`: an address or address difference in bytes (C `intptr_t`).")
    w("pub type MPI_Aint = isize;")
    w("/// `MPI_Offset`: a file offset in bytes (C `int64_t`).")
    w("pub type MPI_Offset = i64;")
    w("/// `MPI_Count`: a count of elements or bytes, large enough for both of the above.")
    w("pub type MPI_Count = i64;")
    w("/// `MPI_Fint`: a Fortran INTEGER (C `int`; the header's type for `MPI_*_c2f`).")
    w("pub type MPI_Fint = c_int;")
    w("")
    w("/// `MPI_Status`: 8 ints (32 bytes), the three public fields then 5 for the")
    w("/// implementation.")
    w("#[repr(C)]")
    w("#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]")
    w("pub struct MPI_Status {")
    w("    /// Source rank.")
    w("    pub MPI_SOURCE: c_int,")
    w("    /// Tag.")
    w("    pub MPI_TAG: c_int,")
    w("    /// Error class.")
    w("    pub MPI_ERROR: c_int,")
    w("    /// Implementation slots (rankwire: see `request.rs`).")
    w("    pub MPI_internal: [c_int; 5],")
    w("}")
    w("")
    for ctype, _, handles in HANDLE_TYPES:
        w("/// `%s` handle (pointer-sized)." % ctype)
        w("pub type %s = usize;" % ctype)
    for ctype, _, _ in TOOL_HANDLES:
        w("/// `%s` handle (pointer-sized)." % ctype)
        w("pub type %s = usize;" % ctype)
    for ename, _ in NAMED_ENUMS:
        w("/// `%s` (a C enum: `c_int`)." % ename)
        w("pub type %s = c_int;" % ename)
    w("")
    for n, v in VERSIONS:
        w("/// `%s`." % n)
        w("pub const %s: c_int = %d;" % (n, v))
    w("")
    for ctype, _, handles in HANDLE_TYPES:
        for n, v in handles:
            w("/// Predefined `%s` `%s`." % (ctype, n))
            w("pub const %s: %s = 0x%03x;" % (n, ctype, v))
        for alias, target, t in HANDLE_ALIASES:
            if t == ctype:
                w("/// `%s`: another name of `%s`." % (alias, target))
                w("pub const %s: %s = %s;" % (alias, t, target))
        w("")
    for comment, group in INT_GROUPS:
        w("// %s." % comment)
        for n, v in group:
            w("/// `%s`." % n)
            w("pub const %s: c_int = %d;" % (n, v))
        w("")
    for ename, group in NAMED_ENUMS:
        for n, v in group:
            w("/// `%s` of `%s`." % (n, ename))
            w("pub const %s: %s = 0x%02x;" % (n, ename, v))
    w("")
    w("// Buffer sizes in bytes (with the terminating NUL) and the bsend overhead in bytes.")
    for n, v in SIZE_MACROS:
        w("/// `%s` (bytes)." % n)
        w("pub const %s: c_int = %d;" % (n, v))
    w("")
    w("// Address constants: compare `ptr as usize` against them.")
    for n, t, v in POINTERS:
        w("/// `%s`: the address `(%s)%d`." % (n, t, v))
        w("pub const %s: usize = %d;" % (n, v))
    for n, t, v in TYPED:
        w("/// `%s`." % n)
        w("pub const %s: %s = %d;" % (n, t, v))
    w("")
    w("// Predefined callbacks: the addresses a callback argument is compared against.")
    for n, t, v in PREDEFINED_CALLBACKS:
        w("/// `%s`: the `%s*` address %d." % (n, t, v))
        w("pub const %s: usize = %d;" % (n, v))
    w("")
    for ctype, _, handles in TOOL_HANDLES:
        for n, v in handles:
            w("/// `%s`." % n)
            w("pub const %s: %s = %d;" % (n, ctype, v))
    w("")
    w("// Callback types.")
    for text in callbacks:
        w(rust_callback(text))
    for alias, target in CALLBACK_ALIASES:
        w("/// `%s`: older name of `%s`." % (alias, target))
        w("pub type %s = %s;" % (alias, target))
    body = "\n".join(o[1:]) + "\n"
    used = [t for t in ("c_char", "c_int", "c_void") if re.search(r"\b%s\b" % t, body)]
    return o[0] + "use std::ffi::{%s};\n\n" % ", ".join(used) + body


# ---------------------------------------------------------------------------------------
# Test inputs: the constant printer (C) and the Rust view of the same names.
# ---------------------------------------------------------------------------------------

C_PRINTER_TOP = """\
/* GENERATED by abi/gen/gen_abi.py; do not edit. Prints every constant of the MPI 5.0
 * ABI table and the sizes and layout of the ABI's types, one "NAME VALUE" line each.
 * abi/tests/header.rs compiles it against rankwire's mpi.h and against MPICH 5.0.2's
 * mpi_abi.h (with -DRW_REFERENCE_HEADER) and compares the two outputs. */
#ifdef RW_REFERENCE_HEADER
#include <mpi_abi.h>
#else
#include <mpi.h>
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define INT(c) printf("%s %lld\\n", #c, (long long)(c))
#define ADDR(c) printf("%s %llu\\n", #c, (unsigned long long)(uintptr_t)(c))
#define SIZE(t) printf("sizeof(%s) %zu\\n", #t, sizeof(t))

int main(void) {
"""


def c_printer():
    o = [C_PRINTER_TOP]
    for t in ["MPI_Aint", "MPI_Offset", "MPI_Count", "MPI_Status"] + \
             [c for c, _, _ in HANDLE_TYPES] + [c for c, _, _ in TOOL_HANDLES] + \
             [e for e, _ in NAMED_ENUMS]:
        o.append("    SIZE(%s);" % t)
    for f in ["MPI_SOURCE", "MPI_TAG", "MPI_ERROR", "MPI_internal"]:
        o.append('    printf("offsetof(MPI_Status, %s) %%zu\\n", offsetof(MPI_Status, %s));'
                 % (f, f))
    for n, kind, _ in all_constants():
        o.append("    %s(%s);" % ("INT" if kind in ("int", "typed") else "ADDR", n))
    o.append("    return 0;")
    o.append("}")
    return "\n".join(o) + "\n"


def rust_table():
    o = ["// GENERATED by abi/gen/gen_abi.py; do not edit. Every constant of the MPI 5.0",
         "// ABI table as the Rust side defines it (included by tests/header.rs).",
         "#[allow(clippy::unnecessary_cast)]",
         "const RUST_CONSTANTS: &[(&str, i128)] = &["]
    for n, _, _ in all_constants():
        o.append("    (\"%s\", mpi_abi::consts::%s as i128)," % (n, n))
    o.append("];")
    return "\n".join(o) + "\n"


# ---------------------------------------------------------------------------------------


def outputs():
    callbacks, mpi, pmpi = load_standard()
    return {
        "include/mpi.h": c_header(callbacks, mpi, pmpi),
        "src/consts.rs": rust_consts(callbacks),
        "tests/header/consts.c": c_printer(),
        "tests/header/table.rs": rust_table(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="compare the committed files with the generated ones")
    ap.add_argument("--print", metavar="FILE", help="print one output to stdout")
    args = ap.parse_args()
    outs = outputs()
    if args.print:
        if args.print not in outs:
            sys.exit("gen_abi: no output %s; outputs: %s" % (args.print, ", ".join(outs)))
        sys.stdout.write(outs[args.print])
        return
    stale = []
    for rel, text in outs.items():
        path = os.path.join(ABI_DIR, rel)
        old = open(path).read() if os.path.exists(path) else None
        if old == text:
            continue
        if args.check:
            stale.append(rel)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        print("gen_abi: wrote abi/%s" % rel)
    if stale:
        sys.exit("gen_abi: abi/%s differ from the generator's output; fix: "
                 "python3 abi/gen/gen_abi.py" % ", abi/".join(stale))


if __name__ == "__main__":
    main()
