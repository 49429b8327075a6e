/*
 * A running game, for the launcher's Windows tests: opens each PATH as a game holds its exe and
 * archives (read access, FILE_SHARE_READ only: others may read it, never write, rename or delete
 * it), a folder with FILE_FLAG_BACKUP_SEMANTICS, shared for read and write but not delete (as a
 * process holds its current folder: it cannot be renamed or deleted, as NTFS refuses to rename a
 * folder holding an open file, which Wine allows), and holds them all until the file STOP exists or
 * SECONDS pass (with no PATH it only runs: Wine's server stays up meanwhile).
 *
 *   hold.exe READY STOP SECONDS [PATH...]
 *
 * Once every path is held it writes "held" to READY; when a path cannot be opened it writes
 * "error <Windows error code> <path>" there instead and exits 2. Exits 0 when told to stop, 3 when
 * SECONDS passed first (a test that forgot to stop it).
 */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

static void report(const wchar_t *ready, const char *text) {
  HANDLE file = CreateFileW(ready, GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
  DWORD written;
  if (file == INVALID_HANDLE_VALUE) return;
  WriteFile(file, text, (DWORD)strlen(text), &written, NULL);
  CloseHandle(file);
}

int wmain(int argc, wchar_t **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: hold.exe READY STOP SECONDS [PATH...]\n");
    return 1;
  }
  const wchar_t *ready = argv[1], *stop = argv[2];
  ULONGLONG deadline = GetTickCount64() + (ULONGLONG)_wtoi(argv[3]) * 1000;
  for (int i = 4; i < argc; i++) {
    DWORD attributes = GetFileAttributesW(argv[i]);
    BOOL folder = attributes != INVALID_FILE_ATTRIBUTES && (attributes & FILE_ATTRIBUTE_DIRECTORY);
    DWORD share = folder ? FILE_SHARE_READ | FILE_SHARE_WRITE : FILE_SHARE_READ;
    DWORD flags = folder ? FILE_FLAG_BACKUP_SEMANTICS : FILE_ATTRIBUTE_NORMAL;
    /* Kept open until the process exits. */
    HANDLE held = CreateFileW(argv[i], GENERIC_READ, share, NULL, OPEN_EXISTING, flags, NULL);
    if (held == INVALID_HANDLE_VALUE) {
      char text[1200];
      snprintf(text, sizeof text, "error %lu %ls", GetLastError(), argv[i]);
      report(ready, text);
      return 2;
    }
  }
  report(ready, "held");
  while (GetFileAttributesW(stop) == INVALID_FILE_ATTRIBUTES) {
    if (GetTickCount64() > deadline) return 3;
    Sleep(20);
  }
  return 0;
}
