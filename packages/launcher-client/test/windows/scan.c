/*
 * An antivirus, for the launcher's Windows tests: watches the folder tree DIR (ReadDirectoryChangesW)
 * and opens each file that appears there (made, or renamed to its name) for MS milliseconds, as a
 * scanner reads a new file, sharing it as SHARE says: "rd" (read and delete, as most scanners: the
 * file can be read, renamed and deleted meanwhile, not written) or "rwd" (read, write and delete).
 * A file still open for writing by its maker is opened as soon as the maker closes it.
 *
 *   scan.exe DIR MS SHARE LOG STOP SECONDS
 *
 * LOG gets "watching" once changes are watched, then "held <path under DIR>" for every file held.
 * Runs until the file STOP exists (exit 0) or SECONDS pass (exit 3).
 */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_FILES 4096

struct entry {
  wchar_t *path; /* under DIR */
  HANDLE handle; /* INVALID_HANDLE_VALUE while waiting for its maker to close it */
  ULONGLONG until; /* held until; while waiting: given up at */
};

static struct entry files[MAX_FILES];
static int count;

static void log_line(const wchar_t *log, const char *word, const wchar_t *path) {
  char text[2200];
  HANDLE file = CreateFileW(log, FILE_APPEND_DATA, FILE_SHARE_READ, NULL, OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
  DWORD written;
  if (file == INVALID_HANDLE_VALUE) return;
  int length = path == NULL ? snprintf(text, sizeof text, "%s\n", word)
                            : snprintf(text, sizeof text, "%s %ls\n", word, path);
  WriteFile(file, text, (DWORD)length, &written, NULL);
  CloseHandle(file);
}

static void want(const wchar_t *name, DWORD bytes) {
  for (int i = 0; i < count; i++)
    if (wcslen(files[i].path) * sizeof(wchar_t) == bytes && memcmp(files[i].path, name, bytes) == 0) return;
  if (count == MAX_FILES) return;
  files[count].path = calloc(bytes / sizeof(wchar_t) + 1, sizeof(wchar_t));
  memcpy(files[count].path, name, bytes);
  files[count].handle = INVALID_HANDLE_VALUE;
  files[count].until = GetTickCount64() + 10000;
  count++;
}

int wmain(int argc, wchar_t **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: scan.exe DIR MS SHARE LOG STOP SECONDS\n");
    return 1;
  }
  const wchar_t *dir = argv[1], *log = argv[4], *stop = argv[5];
  DWORD hold_ms = (DWORD)_wtoi(argv[2]);
  DWORD share = FILE_SHARE_READ | FILE_SHARE_DELETE | (wcscmp(argv[3], L"rwd") == 0 ? FILE_SHARE_WRITE : 0);
  ULONGLONG deadline = GetTickCount64() + (ULONGLONG)_wtoi(argv[6]) * 1000;

  HANDLE watched = CreateFileW(dir, FILE_LIST_DIRECTORY, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                               OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OVERLAPPED, NULL);
  if (watched == INVALID_HANDLE_VALUE) {
    fprintf(stderr, "cannot watch %ls: %lu\n", dir, GetLastError());
    return 2;
  }
  static DWORD changes[16384];
  OVERLAPPED pending = {0};
  pending.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
  const DWORD filter = FILE_NOTIFY_CHANGE_FILE_NAME | FILE_NOTIFY_CHANGE_DIR_NAME;
  if (!ReadDirectoryChangesW(watched, changes, sizeof changes, TRUE, filter, NULL, &pending, NULL)) {
    fprintf(stderr, "cannot watch %ls: %lu\n", dir, GetLastError());
    return 2;
  }
  log_line(log, "watching", NULL);

  while (GetFileAttributesW(stop) == INVALID_FILE_ATTRIBUTES) {
    ULONGLONG now = GetTickCount64();
    if (now > deadline) return 3;
    if (WaitForSingleObject(pending.hEvent, 5) == WAIT_OBJECT_0) {
      DWORD bytes = 0;
      if (GetOverlappedResult(watched, &pending, &bytes, FALSE) && bytes > 0) {
        FILE_NOTIFY_INFORMATION *change = (FILE_NOTIFY_INFORMATION *)changes;
        for (;;) {
          if (change->Action == FILE_ACTION_ADDED || change->Action == FILE_ACTION_RENAMED_NEW_NAME)
            want(change->FileName, change->FileNameLength);
          if (change->NextEntryOffset == 0) break;
          change = (FILE_NOTIFY_INFORMATION *)((char *)change + change->NextEntryOffset);
        }
      }
      ResetEvent(pending.hEvent);
      ReadDirectoryChangesW(watched, changes, sizeof changes, TRUE, filter, NULL, &pending, NULL);
    }
    now = GetTickCount64();
    for (int i = 0; i < count; i++) {
      struct entry *file = &files[i];
      if (file->handle != INVALID_HANDLE_VALUE) {
        if (now < file->until) continue;
        CloseHandle(file->handle);
      } else if (now < file->until) {
        wchar_t full[2048];
        swprintf(full, 2048, L"%ls\\%ls", dir, file->path);
        DWORD attributes = GetFileAttributesW(full);
        if (attributes != INVALID_FILE_ATTRIBUTES && !(attributes & FILE_ATTRIBUTE_DIRECTORY)) {
          file->handle = CreateFileW(full, GENERIC_READ, share, NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
          if (file->handle == INVALID_HANDLE_VALUE && GetLastError() == ERROR_SHARING_VIOLATION) continue;
          if (file->handle != INVALID_HANDLE_VALUE) {
            file->until = now + hold_ms;
            log_line(log, "held", file->path);
            continue;
          }
        }
      }
      /* Released, gone, a folder, or never free within 10 s: forgotten (a later appearance is new). */
      free(file->path);
      files[i--] = files[--count];
    }
  }
  return 0;
}
